#!/usr/bin/env bash
# usage: solve.sh [start|use]   (no argument: both, one after the other)
# `start` returns as soon as the service runs; `use` talks to it from a new
# process, so the two may also be run as two separate commands.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /app/spool/in /app/spool/out

start() {
    if [ -f /app/spool/server.pid ] && kill -0 "$(cat /app/spool/server.pid)" 2>/dev/null; then
        return 0
    fi
    # Its own session and no inherited stdio, so the command that starts it can return.
    setsid nohup bash "$here/server.sh" > /app/spool/server.out 2>&1 < /dev/null &
    for _ in $(seq 1 50); do
        [ -f /app/spool/server.pid ] && return 0
        sleep 0.1
    done
    echo "the service did not start" >&2
    return 1
}

use() {
    {
        bash "$here/client.sh" one alpha
        bash "$here/client.sh" two beta
        bash "$here/client.sh" three gamma
    } > /app/answers.txt
}

case "${1:-all}" in
    start) start ;;
    use) use ;;
    all) start && bash "$0" use ;;
    *) echo "usage: $0 [start|use]" >&2; exit 2 ;;
esac
