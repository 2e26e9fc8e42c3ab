#!/usr/bin/env bash
# Ask the db service (by its name) for its secret.
exec 3<>/dev/tcp/db/7000
read -r answer <&3
echo "$answer" > /app/answer.txt
