#!/usr/bin/env bash
set -euo pipefail
cp /solution/main.py /app/main.py
