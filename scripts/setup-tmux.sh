#!/usr/bin/env bash
# Give this machine tmux (Debian's package), which the terminal agent's opt-in `tmux` tool
# copies, with its libraries and the host's loader, into each sandbox (sandboxes have no
# network to install it; agents/terminal/tmux.py). Idempotent; runs as root or through sudo.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo -n"; fi
if command -v tmux >/dev/null 2>&1; then
    echo "setup-tmux: $(tmux -V) present" >&2
    exit 0
fi
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends tmux >/dev/null
echo "setup-tmux: $(tmux -V) installed" >&2
