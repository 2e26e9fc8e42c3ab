#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh Debian machine (as root),
# then runs it: a virtual environment with crucible[dev], a Docker engine with
# a locally built base image, Buildah with the same base image (image-backed local
# sandboxes), headless Chromium for the browser tests, and tmux (the terminal agent's tmux tool).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ]; then
    bash scripts/setup-docker.sh
    bash scripts/setup-images.sh
    bash scripts/setup-browser.sh
    bash scripts/setup-tmux.sh
else
    echo "not root: skipping Docker, Buildah and Chromium set-up (those tests skip outside CI)" >&2
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
# torch before the rest: trl, transformers and verl need it, and an unpinned torch would be a
# multi-GB CUDA build. torch 2.13.0 is a CPU build this kind of machine keeps on disk for pip;
# once it is installed, the ranges the trainers ask for are met and nothing larger comes in.
.venv/bin/pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/pip install -q --disable-pip-version-check -e '.[dev]'

# Harbor's ATIF validator in a Python 3.12 venv of its own (about 15 s; skipped without 3.12).
bash scripts/setup-harbor-validator.sh || echo "Harbor validator venv not made; its cross-check will skip" >&2

# Timing stays out of tests/ (figures belong to bench/).
bash scripts/check-tests.sh

# -rfEs: the short summary lists failures and errors (so a CI log ends with them) and
# skipped tests with their reason (the live Modal ones without credentials);
# --durations: the slowest tests, to keep the suite's time in view.
exec .venv/bin/pytest -q -rfEs --durations=25 "$@"
