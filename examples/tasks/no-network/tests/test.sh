#!/usr/bin/env bash
# The task runs with network_mode = "no-network", so the right answer is "offline".
# The verifier shares the sandbox and checks that this is true, without a packet: no
# interface but loopback and no default route (IPv4 or IPv6), so nothing can leave.
# Writes 1 to /logs/verifier/reward.txt when the answer is "offline" and the sandbox
# really has no network, else 0.
mkdir -p /logs/verifier

ifaces=$(awk -F: 'NR > 2 { gsub(/ /, "", $1); print $1 }' /proc/net/dev | tr '\n' ' ')
routes=$(awk 'NR > 1 && $2 == "00000000"' /proc/net/route 2>/dev/null;
         awk '$1 ~ /^0+$/ && $2 == "00" && $10 != "lo"' /proc/net/ipv6_route 2>/dev/null)
echo "note: interfaces: ${ifaces:-none}; default routes: ${routes:-none}"
isolated=0
if [ -z "$routes" ] && [ "$(echo $ifaces)" = "lo" ]; then isolated=1; fi

reward=0
answer=$(tr -d '[:space:]' 2>/dev/null < /app/network.txt || true)
if [ "$isolated" != 1 ]; then
    echo "fail: the sandbox has a network (interfaces: $ifaces); it should have none"
elif [ "$answer" = "offline" ]; then
    reward=1
    echo "ok: /app/network.txt says offline"
else
    echo "fail: /app/network.txt says '${answer:-<missing>}', expected offline"
fi
echo "$reward" > /logs/verifier/reward.txt
