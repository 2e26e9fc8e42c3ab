#!/usr/bin/env bash
correctness=0
style=0
if [ -f /app/greet.sh ] && [ "$(bash /app/greet.sh world 2>/dev/null)" = "hello, world" ]; then
    correctness=1
fi
if [ "$(head -n 1 /app/greet.sh 2>/dev/null)" = "#!/usr/bin/env bash" ]; then
    style=1
fi
printf '{"correctness": %s, "style": %s}\n' "$correctness" "$style" > /logs/verifier/reward.json
