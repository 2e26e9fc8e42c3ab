#!/usr/bin/env bash
# The spool service: polls /app/spool/in for <id>.req and answers in /app/spool/out.
spool=/app/spool
mkdir -p "$spool/in" "$spool/out"
echo $$ > "$spool/server.pid"
while true; do
    for req in "$spool"/in/*.req; do
        [ -e "$req" ] || continue
        id=$(basename "$req" .req)
        tr '[:lower:]' '[:upper:]' < "$req" > "$spool/out/$id.tmp"
        # The bookkeeping first, the response last: a client returns as soon as the
        # response appears, and the agent phase (every process of it, this service
        # too) may end right then, so nothing may be left to do after it.
        rm -f "$req"
        echo "$id" >> "$spool/served.log"
        # Write then rename, so a client never reads a half-written response.
        mv "$spool/out/$id.tmp" "$spool/out/$id.resp"
    done
    sleep 0.1
done
