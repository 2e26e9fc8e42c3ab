"""OpenRLHF: `--reward.remote_url` pointed at crucible, through a small proxy.

    crucible serve examples/tasks/hello-file --env local     # prints URL and token
    export CRUCIBLE_SERVE_URL=... CRUCIBLE_SERVE_TOKEN=...
    python -m crucible.trainers.openrlhf --port 5000 --submission files --unscorable-value 0.0
        # prints remote_rm_url: http://127.0.0.1:5000/v1/openrlhf?token=...
    python examples/trainers/openrlhf_remote_rm.py 'http://127.0.0.1:5000/v1/openrlhf?token=...'

In an OpenRLHF 0.11 run (export the prompt set with `crucible dataset export`):

    --reward.remote_url 'http://127.0.0.1:5000/v1/openrlhf?token=...' --data.label_key task_id

OpenRLHF cannot send headers: the token rides in the URL. An unscorable grade answers
--unscorable-value (OpenRLHF cannot mask), flagged in extra_logs.crucible_unscorable.
This script posts what OpenRLHF posts and prints what it reads.
"""

from __future__ import annotations

import json
import sys

import httpx

PROMPT = "<|im_start|>user\nWrite the file.<|im_end|>\n<|im_start|>assistant\n"


def main(url: str) -> None:
    right = json.dumps({"/app/hello.txt": "Hello, crucible!\n"})
    body = {"query": [PROMPT + right + "<|im_end|>", PROMPT + "{}"], "prompts": [PROMPT] * 2,
            "labels": ["hello-file", "hello-file"]}  # fmt: skip
    got = httpx.post(url, json=body, timeout=180).raise_for_status().json()
    print("rewards:", got["rewards"], "extra_logs:", got["extra_logs"])


if __name__ == "__main__":
    main(sys.argv[1])
