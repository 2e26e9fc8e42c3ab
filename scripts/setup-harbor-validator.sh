#!/usr/bin/env bash
# A throwaway Python 3.12 venv holding Harbor's ATIF validator, for tests/export/test_atif.py's
# cross-check (Harbor needs Python >= 3.12; crucible runs on 3.11). Harbor is installed without
# its dependencies: the validator needs only pydantic, which keeps this to about 15 seconds.
# Prints the venv's path; exits 0 without one (and says why) when no Python 3.12 is found.
set -euo pipefail
venv="${CRUCIBLE_HARBOR_VENV:-/tmp/crucible-harbor312}"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import harbor.utils.trajectory_validator' 2>/dev/null; then
    echo "$venv"; exit 0
fi
py=""
for cand in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
    if "$cand" -c "import sys; assert sys.version_info >= (3, 12)" >/dev/null 2>&1; then py="$cand"; break; fi
done
if [ -z "$py" ]; then
    echo "no Python 3.12 found: the Harbor validator cross-check will skip" >&2; exit 0
fi
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check 'pydantic>=2.6'
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps 'harbor>=0.25'
"$venv/bin/python" -c 'import harbor.utils.trajectory_validator'
echo "$venv"
