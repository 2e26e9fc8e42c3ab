#!/usr/bin/env bash
set -euo pipefail

touch /app/done.txt
