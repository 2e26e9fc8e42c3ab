#!/usr/bin/env bash
# The shallow check a test script can make without Modal or Python: the program is
# there and is a Modal program. Whether its outputs match the original, and whether
# Modal does the work, is for the host-side stages (contracts gate, io gate).
mkdir -p /logs/verifier
if [ -f /app/main.py ] && grep -q 'import modal' /app/main.py && grep -q 'local_entrypoint' /app/main.py; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
