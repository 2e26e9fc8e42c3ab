#!/usr/bin/env bash
# This verifier outlives its 3 s budget on purpose: the trial must be killed
# and end as verifier_failed (no reward), never be read as a 0.
mkdir -p /logs/verifier
sleep 60
# Only reached if the timeout was not enforced.
if [ -f /app/done.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
