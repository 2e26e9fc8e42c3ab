#!/usr/bin/env bash
# 1 when /app/answer.txt holds what db serves (a secret made when db started).
exec 3<>/dev/tcp/db/7000 && read -r expected <&3
if [ -n "$expected" ] && [ "$(cat /app/answer.txt 2>/dev/null)" = "$expected" ]; then
  echo 1
else
  echo 0
fi > /logs/verifier/reward.txt
