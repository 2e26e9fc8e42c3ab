#!/usr/bin/env bash
exec 3<>/dev/tcp/vault/7100
read -r token <&3
echo "$token" > /app/token.txt
