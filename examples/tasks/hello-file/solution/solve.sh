#!/usr/bin/env bash
set -euo pipefail

echo 'Hello, crucible!' > /app/hello.txt
