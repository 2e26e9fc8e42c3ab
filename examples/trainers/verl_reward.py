"""verl: every response graded in its task's sandbox by a running `crucible serve`.

    crucible serve examples/tasks/hello-file --env local     # prints URL and token
    export CRUCIBLE_SERVE_URL=... CRUCIBLE_SERVE_TOKEN=...
    python examples/trainers/verl_reward.py examples/tasks/hello-file

It writes verl's prompt set (`verl_prompts.parquet`: one row per task, naming the task in
`reward_model.ground_truth` and `extra_info`) and scores two responses per task the way
verl's reward manager calls its reward function. In a verl run the same function is set in
the trainer's config (verl 0.9):

    reward:
      reward_manager: {name: naive}
      custom_reward_function:
        path: pkg://crucible.trainers.verl
        name: compute_score_async       # the reward loop awaits it; or compute_score
        reward_kwargs: {submission: files, unscorable_value: 0.0}
    data: {train_files: verl_prompts.parquet}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from crucible.tasks.dataset import check_tasks
from crucible.trainers.verl import compute_score, verl_row


def main(paths: list[str]) -> None:
    tasks = [c.task for c in check_tasks([Path(p) for p in paths]) if c.task is not None]
    rows = [verl_row({"prompt": [{"role": "user", "content": t.instruction}],
                      "task_id": t.name, "task_hash": t.digest}, i)
            for i, t in enumerate(tasks)]  # fmt: skip
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), "verl_prompts.parquet")
        print(f"wrote verl_prompts.parquet ({len(rows)} rows)")
    except ImportError:
        print("pyarrow is not installed: no parquet written")
    for row in rows:
        for response in (json.dumps({"/app/hello.txt": "Hello, crucible!\n"}), "no idea"):
            score = compute_score(row["data_source"], response,
                                  row["reward_model"]["ground_truth"], row["extra_info"],
                                  submission="files")  # fmt: skip
            print(row["extra_info"]["task_id"], repr(response[:30]), score)


if __name__ == "__main__":
    main(sys.argv[1:] or ["examples/tasks/hello-file"])
