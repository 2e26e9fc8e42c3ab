#!/usr/bin/env bash
# Shared by every step's test.sh (sourced from /tests): writes 1 when FILE holds exactly the
# lines given, else 0.
expect_lines() {
    local file=$1
    shift
    if [ -f "$file" ] && [ "$(cat "$file")" = "$(printf '%s\n' "$@")" ]; then
        echo 1
    else
        echo 0
    fi > /logs/verifier/reward.txt
}
