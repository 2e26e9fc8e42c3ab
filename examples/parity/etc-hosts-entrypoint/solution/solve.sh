#!/usr/bin/env bash
getent hosts ads.blocked.test | awk '{ print $1 }' > /app/resolved.txt
printf '127.0.0.1 allowed.local.test\n' >> /etc/hosts
