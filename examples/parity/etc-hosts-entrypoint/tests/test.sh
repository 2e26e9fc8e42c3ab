#!/usr/bin/env bash
# 1 when the service started (its status file), the blocked name resolves to 0.0.0.0,
# the agent's answer says so, and the agent's own entry resolves.
ok=1
grep -q '^blocking 2 names$' /var/run/blocker.status 2>/dev/null || ok=0
[ "$(getent hosts tracker.blocked.test | awk '{ print $1 }')" = "0.0.0.0" ] || ok=0
[ "$(cat /app/resolved.txt 2>/dev/null)" = "0.0.0.0" ] || ok=0
[ "$(getent hosts allowed.local.test | awk '{ print $1 }')" = "127.0.0.1" ] || ok=0
echo "$ok" > /logs/verifier/reward.txt
