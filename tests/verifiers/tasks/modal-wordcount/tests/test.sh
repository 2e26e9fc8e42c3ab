#!/usr/bin/env bash
# What a test script can check without Python or Modal in the sandbox: the program is
# there, defines the ported function and keeps the original inputs. Whether Modal does
# the work is for the host-side stages (contracts gate, judge veto).
mkdir -p /logs/verifier
main=/app/main.py
if [ -f "$main" ] && grep -q '^def count(line' "$main" \
    && grep -q '"jumps over the lazy dog"' "$main"; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
