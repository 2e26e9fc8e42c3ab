#!/usr/bin/env bash
# 1 when /app/token.txt holds the token vault hands out now (made when vault started).
exec 3<>/dev/tcp/vault/7100 && read -r want <&3
if [ -n "$want" ] && [ "$(cat /app/token.txt 2>/dev/null)" = "$want" ]; then
    echo 1
else
    echo 0
fi > /logs/verifier/reward.txt
