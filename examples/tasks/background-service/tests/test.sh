#!/usr/bin/env bash
# Every agent process is gone by now, so this checks what the service left
# behind, not the live service. Writes 1 to /logs/verifier/reward.txt when all
# checks pass, else 0.
mkdir -p /logs/verifier
spool=/app/spool
ok=1

check() {  # check DESCRIPTION COMMAND...
    local what=$1
    shift
    if "$@"; then echo "ok: $what"; else echo "fail: $what"; ok=0; fi
}

check "answers.txt holds ALPHA, BETA, GAMMA" \
    bash -c 'printf "ALPHA\nBETA\nGAMMA\n" | cmp -s - /app/answers.txt'
check "server.pid holds a process id" \
    grep -qxE '[0-9]+' "$spool/server.pid"
for pair in one:ALPHA two:BETA three:GAMMA; do
    id=${pair%%:*}
    want=${pair#*:}
    check "response $id is $want" \
        bash -c "[ \"\$(cat '$spool/out/$id.resp' 2>/dev/null)\" = '$want' ]"
    check "request $id was consumed" test ! -e "$spool/in/$id.req"
done
for id in one two three; do
    check "served.log lists $id" grep -qsx "$id" "$spool/served.log"
done

if [ "$ok" = 1 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
