#!/usr/bin/env bash
# Give this machine a headless Chromium (Debian's chromium + chromium-driver).
#
# Idempotent and quiet: does nothing when `chromium` and `chromedriver` are on
# PATH; otherwise installs them with apt. The browser tests
# (pytest -m browser) drive Chromium over the DevTools protocol; the driver is
# installed too so selenium-based checks work. Runs as root (or through sudo)
# with no stdin; CI calls it from .ci/run.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo -n"; fi

say() { echo "setup-browser: $*" >&2; }
die() { say "error: $*"; exit 1; }

have() { command -v "$1" >/dev/null 2>&1; }

if have chromium && have chromedriver; then
    say "chromium present: $(chromium --version 2>/dev/null || echo unknown)"
    exit 0
fi

$SUDO apt-get update -qq >/dev/null || die "apt-get update failed"
$SUDO apt-get install -y -qq --no-install-recommends \
    chromium chromium-driver fonts-dejavu-core >/dev/null \
    || die "apt-get install chromium chromium-driver failed"

have chromium || die "chromium is still missing after install"
say "installed: $(chromium --version 2>/dev/null || echo unknown)"
