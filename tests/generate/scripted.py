"""A scripted setter and solver for generation tests, on the scripted OpenAI server.

Tasks are tiny (hello-file style): "write WORD into /app/WORD.txt". The setter
answers each request from `plan`, a list of callables request -> files (or a
Step); the solver (the terminal agent) solves a task's attempt when the policy
for its WORD says so for that attempt, else it does nothing, then submits.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

from tests.helpers.fake_openai import Step, bash, submit, tool

BASE = "debian:bookworm-slim"


def task_files(
    word: str,
    *,
    category: str = "files",
    leak: bool = False,
    oracle_ok: bool = True,
    nop_passes: bool = False,
    failure_passes: bool = False,
    dockerfile: str | None = None,
    contracts: list[str] | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    solve = f"echo '{word}-value-of-the-task' > /app/{word}.txt"
    instruction = f"Write the line `{word}-value-of-the-task` into the file `/app/{word}.txt`.\n"
    if leak:
        instruction += f"\nRun exactly:\n\n    {solve}\n"
    check = f"grep -qx '{word}-value-of-the-task' /app/{word}.txt"
    if nop_passes:
        check = "true"
    meta = f"contracts = {json.dumps(contracts)}\n" if contracts else ""
    files = {
        "task.toml": (
            'schema_version = "1.1"\n[metadata]\ndescription = "write a word"\n'
            + meta
            + "[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 30.0\n"
            '[environment]\nnetwork_mode = "no-network"\n'
        ),
        "instruction.md": instruction,
        "environment/Dockerfile": dockerfile or f"FROM {BASE}\n\nWORKDIR /app\n",
        "solution/solve.sh": "#!/usr/bin/env bash\n" + (solve if oracle_ok else "true") + "\n",
        "solution/failures/wrong.sh": "#!/usr/bin/env bash\n"
        + (solve if failure_passes else f"echo nope > /app/{word}.txt")
        + "\n",
        "tests/test.sh": (
            "#!/usr/bin/env bash\nmkdir -p /logs/verifier\n"
            f"if {check}; then echo 1 > /logs/verifier/reward.txt; "
            "else echo 0 > /logs/verifier/reward.txt; fi\n"
        ),
    }
    files.update(extra or {})
    return {"category": category, "files": files}  # type: ignore[dict-item]


def propose(proposal: dict[str, Any], *, as_text: bool = False) -> Step:
    if as_text:
        return Step(content="Here it is:\n```json\n" + json.dumps(proposal) + "\n```\n")
    return tool("propose_task", proposal)


def asked_category(body: dict[str, Any]) -> str | None:
    text = body["messages"][-1]["content"]
    m = re.search(r"category `([^`]+)`", text)
    return m.group(1) if m else None


def is_hardening(body: dict[str, Any]) -> bool:
    return "harder child" in body["messages"][-1]["content"]


class Solver:
    """The terminal agent's scripted model: policy[word] is the list of attempts' success
    (cycled); words without a policy are always solved."""

    def __init__(self, policy: dict[str, list[bool]] | None = None) -> None:
        self.policy = policy or {}
        self.count: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Step:
        msgs = body["messages"]
        if any(m.get("role") == "tool" for m in msgs):
            return submit()
        text = " ".join(str(m.get("content") or "") for m in msgs)
        m = re.search(r"`([A-Za-z0-9_-]+)-value-of-the-task`", text)
        word = m.group(1) if m else "?"
        with self.lock:
            i = self.count.get(word, 0)
            self.count[word] = i + 1
        wins = self.policy.get(word, [True])
        if wins[i % len(wins)]:
            return bash(f"echo '{word}-value-of-the-task' > /app/{word}.txt")
        return bash("true")


def forever(
    step: Callable[[dict[str, Any]], Step], n: int = 400
) -> list[Callable[[dict[str, Any]], Step]]:
    return [step] * n


CATEGORIES = ("files", "text", "config", "archive", "permissions")
# What the scripted setter proposes for the n-th request of a category (cycled): a task the
# solver always solves (to be hardened), a leaked solution, an in-band task, a free reward,
# a weak failure case, a repeat of the in-band task, a broken reference; each category
# starts at its own place in the cycle.
KINDS = ("easy", "leak", "good", "nop", "weak", "dup", "broken", "good")


class Curriculum:
    """A setter that plays a plausible run over CATEGORIES, and the solver it is rated by."""

    def __init__(self) -> None:
        self.solver = Solver()
        self.asked: dict[str, int] = {}
        self.last_good: dict[str, str] = {}
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Step:
        prompt = body["messages"][-1]["content"]
        if is_hardening(body):
            m = re.search(r"`([A-Za-z0-9_-]+)-value-of-the-task`", prompt)
            parent = m.group(1) if m else "x"
            cat = next((c for c in CATEGORIES if parent.startswith(c)), CATEGORIES[0])
            word = parent + "h"
            self.solver.policy[word] = [True, False]  # the child lands in the band
            return propose(task_files(word, category=cat))
        cat = asked_category(body) or CATEGORIES[0]
        with self.lock:
            n = self.asked.get(cat, 0)
            self.asked[cat] = n + 1
        offset = CATEGORIES.index(cat) if cat in CATEGORIES else 0  # each kind shows up
        kind, word = KINDS[(n + offset) % len(KINDS)], f"{cat}{n}"
        if kind == "dup" and cat in self.last_good:
            return propose(task_files(self.last_good[cat], category=cat))
        if kind == "good":
            self.solver.policy[word] = [False, True]
            self.last_good[cat] = word
        return propose(
            task_files(
                word,
                category=cat,
                leak=kind == "leak",
                nop_passes=kind == "nop",
                failure_passes=kind == "weak",
                oracle_ok=kind != "broken",
            ),
            as_text=n % 3 == 2,  # some replies without a tool call
        )
