#!/usr/bin/env bash
# The spool service: polls /app/spool/in for <id>.req and answers in /app/spool/out.
spool=/app/spool
mkdir -p "$spool/in" "$spool/out"
echo $$ > "$spool/server.pid"
while true; do
    for req in "$spool"/in/*.req; do
        [ -e "$req" ] || continue
        id=$(basename "$req" .req)
        # Write then rename, so a client never reads a half-written response.
        tr '[:lower:]' '[:upper:]' < "$req" > "$spool/out/$id.tmp"
        mv "$spool/out/$id.tmp" "$spool/out/$id.resp"
        rm -f "$req"
        echo "$id" >> "$spool/served.log"
    done
    sleep 0.1
done
