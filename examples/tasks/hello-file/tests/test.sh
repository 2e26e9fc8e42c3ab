#!/usr/bin/env bash
# Writes 1 to /logs/verifier/reward.txt when /app/hello.txt holds exactly the
# expected line, else 0 (a missing file included).
mkdir -p /logs/verifier

reward=0
if [ -f /app/hello.txt ] && printf 'Hello, crucible!\n' | cmp -s - /app/hello.txt; then
    reward=1
    echo "ok: /app/hello.txt is right"
elif [ -f /app/hello.txt ]; then
    echo "fail: /app/hello.txt holds:"
    head -c 200 /app/hello.txt
else
    echo "fail: /app/hello.txt does not exist"
fi
echo "$reward" > /logs/verifier/reward.txt
