#!/usr/bin/env bash
source /tests/grade.sh
expect_lines /app/notes.txt alpha beta
