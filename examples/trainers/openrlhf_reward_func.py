"""OpenRLHF without a proxy: `--reward.remote_url` naming this file.

OpenRLHF 0.11 loads a remote_rm_url ending in `.py` and runs its
`reward_func(queries, prompts, labels)` in a thread (openrlhf/utils/agent.py); this one
grades through a running `crucible serve` (CRUCIBLE_SERVE_URL / CRUCIBLE_SERVE_TOKEN):

    --reward.remote_url examples/trainers/openrlhf_reward_func.py --data.label_key task_id

Run directly, it calls reward_func as OpenRLHF does and prints what OpenRLHF reads:

    python examples/trainers/openrlhf_reward_func.py
"""

from __future__ import annotations

import json

from crucible.trainers.openrlhf import make_reward_func

reward_func = make_reward_func(submission="files", unscorable_value=0.0)

if __name__ == "__main__":
    prompt = "<|im_start|>user\nWrite the file.<|im_end|>\n<|im_start|>assistant\n"
    right = json.dumps({"/app/hello.txt": "Hello, crucible!\n"})
    for reply in (right, "{}"):
        print(reward_func([prompt + reply + "<|im_end|>"], [prompt], ["hello-file"]))
