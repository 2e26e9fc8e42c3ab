#!/bin/sh
# Block every name of the list, then start the "service" (a status file it keeps);
# a failed write stops here, before the service, as the recipe's entrypoint does.
set -e
while read -r name; do
    [ -n "$name" ] && printf '0.0.0.0 %s\n' "$name" >> /etc/hosts
done < /etc/blocklist.txt
echo "blocking $(wc -l < /etc/blocklist.txt) names" > /var/run/blocker.status
exec "$@"
