"""`crucible adapt answers`: prompts and their answers (a Hugging Face dataset or a
local JSONL/Parquet file) -> single-turn tasks for RL.

Each row becomes a task whose instruction is the prompt and asks for the answer in
/logs/agent/answer.txt. The test compares it with the row's answer by a reward
function: the built-ins `exact` (equal once surrounding whitespace is stripped) and
`numeric` (equal as numbers, within 1e-6 relative), or `module:function` on the host,
imported by path. The tests run no interpreter in the sandbox: test.sh prints the
answer after a header line, and the `answer` stage (verifiers/stages/answer.py) reads
it from test.sh's output as the host captured it, and scores it.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, ClassVar

from crucible.adapt.base import Adapter, AdapterOptions, AdaptError, TaskFiles
from crucible.adapt.sources import load_rows
from crucible.verifiers.stages.answer import EXPECTED_FILE, HEADER, check_reward_name

TEST_SH = f"""\
#!/bin/bash
# crucible: hand the agent's answer to the host (the answer stage scores it there).
mkdir -p /logs/verifier && printf 1 > /logs/verifier/reward.txt
echo {HEADER}
if [ -f /logs/agent/answer.txt ] && [ ! -L /logs/agent/answer.txt ]; then
    cat /logs/agent/answer.txt
fi
"""

SOLVE_SH = """\
#!/bin/bash
mkdir -p /logs/agent
cp "${0%/*}/answer.txt" /logs/agent/answer.txt
"""


class AnswersOptions(AdapterOptions):
    prompt_field: str = "prompt"
    answer_field: str = "answer"
    id_field: str | None = None  # a column naming each row (default: a hash of the prompt)
    reward: str = "exact"  # exact | numeric | module:function
    split: str = "train"
    prefix: str = "answer"
    timeout_sec: float = 600.0


class AnswersAdapter(Adapter):
    name: ClassVar[str] = "answers"
    summary: ClassVar[str] = "prompts and answers -> single-turn tasks scored by a reward fn"
    options_type: ClassVar[type[AdapterOptions]] = AnswersOptions
    options: AnswersOptions

    def rows(self, source: str) -> list[dict[str, Any]]:
        check_reward_name(self.options.reward)
        return load_rows(source, self.options.split)

    def task(self, row: dict[str, Any]) -> TaskFiles:
        o = self.options
        prompt, answer = row.get(o.prompt_field), row.get(o.answer_field)
        if not isinstance(prompt, str) or not prompt.strip():
            raise AdaptError(f"a row has no {o.prompt_field!r} text: {str(row)[:200]}")
        if answer is None:
            raise AdaptError(f"a row has no {o.answer_field!r}: {str(row)[:200]}")
        ident = str(row[o.id_field]) if o.id_field and row.get(o.id_field) is not None else None
        ident = ident or hashlib.sha256(prompt.encode()).hexdigest()[:12]
        name = f"{o.prefix}-{re.sub(r'[^A-Za-z0-9._-]+', '-', ident)}"[:120]
        expected = str(answer)
        toml = "\n".join(
            [
                'schema_version = "1.1"',
                "",
                "[metadata]",
                'source = "answers"',
                f"row_id = {json.dumps(ident)}",
                "",
                "[[metadata.crucible.stages]]",
                'kind = "answer"',
                'role = "gate"',
                f"reward = {json.dumps(o.reward)}",
                "",
                "[agent]",
                f"timeout_sec = {o.timeout_sec}",
                "",
                "[verifier]",
                "timeout_sec = 60.0",
                "",
            ]
        )
        instruction = (
            prompt.strip() + "\n\nWrite only your final answer to /logs/agent/answer.txt.\n"
        )
        return TaskFiles(
            name=name,
            files={
                "task.toml": toml,
                "instruction.md": instruction,
                "solution/solve.sh": SOLVE_SH,
                "solution/answer.txt": expected + "\n",
                "tests/test.sh": TEST_SH,
                f"tests/{EXPECTED_FILE}": json.dumps({"answer": expected}) + "\n",
            },
            executable={"solution/solve.sh", "tests/test.sh"},
        )
