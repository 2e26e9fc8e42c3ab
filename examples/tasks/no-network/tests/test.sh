#!/usr/bin/env bash
# The task runs with network_mode = "no-network", so the right answer is
# "offline". Writes 1 to /logs/verifier/reward.txt for it, else 0.
mkdir -p /logs/verifier

# For the log only: what the verifier itself sees (it shares the sandbox).
if timeout 2 bash -c 'exec 3<>/dev/tcp/1.1.1.1/53' 2>/dev/null; then
    echo "note: the verifier could open 1.1.1.1:53; the sandbox has a network"
else
    echo "note: the verifier could not open 1.1.1.1:53"
fi

reward=0
answer=$(tr -d '[:space:]' 2>/dev/null < /app/network.txt || true)
if [ "$answer" = "offline" ]; then
    reward=1
    echo "ok: /app/network.txt says offline"
else
    echo "fail: /app/network.txt says '${answer:-<missing>}', expected offline"
fi
echo "$reward" > /logs/verifier/reward.txt
