#!/usr/bin/env bash
# Writes /logs/verifier/reward.json with two metrics:
#   reward : 1.0 when /app/primes.txt is exactly right, else 0.0
#   recall : the fraction of the 10 primes below 30 found on a line of their own
# Every path writes both keys (a missing file scores 0.0 on each).
mkdir -p /logs/verifier

expected="2 3 5 7 11 13 17 19 23 29"
reward=0.0
recall=0.0
if [ -f /app/primes.txt ]; then
    if printf '%s\n' $expected | cmp -s - /app/primes.txt; then
        reward=1.0
    fi
    found=0
    for p in $expected; do
        if grep -qx "$p" /app/primes.txt; then found=$((found + 1)); fi
    done
    recall=$(awk -v f="$found" 'BEGIN { printf "%.2f", f / 10 }')
    echo "found $found of 10 primes"
else
    echo "fail: /app/primes.txt does not exist"
fi
printf '{"reward": %s, "recall": %s}\n' "$reward" "$recall" > /logs/verifier/reward.json
cat /logs/verifier/reward.json
