#!/usr/bin/env bash
# The shallow check a test script can make in the sandbox, whose python3 (if any) may lack
# numpy and modal: the program is there, parses, imports modal and has a local entrypoint.
# Whether its outputs match the original, and whether Modal does the work, is for the
# host-side stages (contracts gate, io gate).
mkdir -p /logs/verifier
prog=/app/main.py
ok=0
if [ -f "$prog" ] && grep -Eq '^(import modal|from modal import)' "$prog" && grep -q 'local_entrypoint' "$prog"; then
    ok=1
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' "$prog" || ok=0
    fi
fi
echo "$ok" > /logs/verifier/reward.txt
