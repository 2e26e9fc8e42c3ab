#!/usr/bin/env bash
set -euo pipefail

# Trial division: small enough to do in bash alone.
: > /app/primes.txt
for ((n = 2; n < 30; n++)); do
    prime=1
    for ((d = 2; d * d <= n; d++)); do
        if ((n % d == 0)); then prime=0; break; fi
    done
    if ((prime)); then echo "$n" >> /app/primes.txt; fi
done
