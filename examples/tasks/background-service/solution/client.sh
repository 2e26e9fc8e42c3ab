#!/usr/bin/env bash
# Sends one request to the spool service and prints the response.
# usage: client.sh ID TEXT
set -euo pipefail
spool=/app/spool
id=$1
text=$2
printf '%s\n' "$text" > "$spool/in/$id.tmp"
mv "$spool/in/$id.tmp" "$spool/in/$id.req"   # the service only picks up *.req
for _ in $(seq 1 100); do
    if [ -f "$spool/out/$id.resp" ]; then
        cat "$spool/out/$id.resp"
        exit 0
    fi
    sleep 0.1
done
echo "no response for $id after 10s" >&2
exit 1
