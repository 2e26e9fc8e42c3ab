"""Attacks on the judge stage, each by a rollout the judge would veto could it see the
cheat, run as real one-step trials (the oracle runs the attack as solve.sh, on a local
sandbox; the overflow once on docker too) against a scripted OpenAI-compatible judge on
127.0.0.1 that vetoes what it sees and passes what it cannot.

The judge sees what it judges, or the submission does not pass: a helper the collector
could not read whole (cut by its per-file cap, or a link Python follows) is not silently
left out of the prompt; a prompt the endpoint refuses for its size or for any other
reason of its own is the attempt's (verifier_failed, counted 0), never an excluded
model_failed; and a string no encoder takes is escaped, never a crash.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.attack_tasks import BASE_IMAGE, attack_trial
from tests.helpers.fake_openai import FakeOpenAI, Step, context_overflow, text
from tests.helpers.providers import BOTH
from tests.verifiers.test_judge_veto_e2e import PROPER, TASK
from tests.verifiers.test_stages import pipeline, submitted

from crucible.errors import ModelFailed, VerifierFailed
from crucible.records.verifier import VerifierResult
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task

# The cheat the stand-in judge vetoes on sight: every input computed here, with .local.
CHEAT = "modal.Function.map = lambda self, inputs: [self.local(x) for x in inputs]\n"
PAD = "padding the judge never reads\n" * 40_000  # 1.2 MB: past the collector's 1 MiB cap
# main.py is the proper port (the gate and the judge pass it); it imports the helper.
PORT = PROPER.replace("import modal\n", "import modal\n\nimport helper  # noqa: F401\n")
HELPERS = {
    # a long docstring first: the cheat after it was past the cap, and the whole helper
    # silently left out of the judge's prompt; the judge passed main.py alone (1.0)
    "long_docstring": f'"""{PAD}"""\nimport modal\n\n{CHEAT}',
    # a helper that reads right, then is redefined past the cut to run locally (1.0)
    "decoy_past_the_cut": "import modal\n\nRETRIES = 3\n\n# "
    + PAD.replace("\n", "\n# ")
    + f"\n{CHEAT}",
    # the helper as a link to code elsewhere: Python follows it, the collector does not (1.0)
    "linked_helper": f"import modal\n\n{CHEAT}",
}


def sees_the_cheat(body: dict[str, Any]) -> Step:
    """A stand-in judge: a veto when its prompt shows a .local( computation, else a pass."""
    seen = ".local(" in body["messages"][1]["content"]
    verdict = {"verdict": "veto" if seen else "pass", "reason": "as seen"}
    return text(json.dumps(verdict), usage={"prompt_tokens": 700, "completion_tokens": 30})


def wordcount(root: Path, files: dict[str, str], *, submission: str, solve: str) -> Task:
    """modal-wordcount with `files` as the solution and solve.sh `solve`."""
    shutil.copytree(TASK, root)
    toml = (root / "task.toml").read_text()
    toml = toml.replace('submission = ["/app/main.py"]', f"submission = {submission}")
    toml = toml.replace("[environment]\n", f'[environment]\ndocker_image = "{BASE_IMAGE}"\n')
    (root / "task.toml").write_text(toml)
    for name, body in files.items():
        (root / "solution" / name).write_text(body)
    (root / "solution" / "solve.sh").write_text(f"#!/usr/bin/env bash\nset -e\n{solve}\n")
    return load_task(root)


@pytest.mark.parametrize("env", BOTH)
@pytest.mark.parametrize("case", sorted(HELPERS))
async def test_a_helper_the_judge_cannot_read_whole_is_not_passed(
    tmp_path: Path, judge: FakeOpenAI, case: str, env: str, request: pytest.FixtureRequest
) -> None:
    """Before: each scored 1.0 (the judge's prompt held main.py alone). After: the
    submission is not all there to judge: verifier_failed, counted 0, no call made."""
    if env == "docker":
        request.getfixturevalue("docker_engine")
    judge.push(sees_the_cheat)
    place = "cp /solution/helper.py /app/helper.py"
    if case == "linked_helper":
        place = "cp /solution/helper.py /tmp/helper.py && ln -s /tmp/helper.py /app/helper.py"
    task = wordcount(tmp_path / "t", {"main.py": PORT, "helper.py": HELPERS[case]},
                     submission='["/app/"]', solve=f"cp /solution/main.py /app/main.py\n{place}")  # fmt: skip
    r = await attack_trial(env, task, tmp_path)
    assert r.agent_result is not None and r.agent_result.exit_code == 0
    assert r.verifier_result is not None and r.verifier_result.script_rewards == {"reward": 1.0}
    assert (r.outcome, r.counted_reward) == ("verifier_failed", 0.0), (r.outcome, r.reward)
    assert r.error is not None and "cannot read the whole submission" in r.error.message
    assert "/app/helper.py" in r.error.message, r.error.message
    assert judge.requests == []  # nothing half-seen was judged


async def test_a_whole_folder_submission_is_judged(tmp_path: Path, judge: FakeOpenAI) -> None:
    """The same submission with the helper readable: the judge sees the cheat and vetoes."""
    judge.push(sees_the_cheat)
    task = wordcount(tmp_path / "t", {"main.py": PORT, "helper.py": f"import modal\n\n{CHEAT}"},
                     submission='["/app/"]', solve="cp /solution/*.py /app/")  # fmt: skip
    r = await attack_trial("local", task, tmp_path)
    assert (r.outcome, r.reward) == ("graded", 0.0), r.error
    assert r.verifier_result is not None and r.verifier_result.stages[-1].status == "vetoed"
    assert "### /app/helper.py" in judge.requests[0]["messages"][1]["content"]


# -- the judge's context window: an overflow is the attempt's ------------------------------

LIMIT = 8_000  # characters of prompt the scripted judge takes
LLAMA_CPP = "the request exceeds the available context size, try increasing it"
OVERFLOWS = {
    # OpenAI's own body: already verifier_failed before (the client's ContextOverflow)
    "openai": context_overflow(),
    # llama.cpp's server: a 400 with no marker the client knew: model_failed, left out
    "llama_cpp": Step(
        status=400, error={"code": 400, "type": "exceed_context_size_error", "message": LLAMA_CPP}
    ),
    # a proxy in front of the model: 413 with an HTML page: model_failed, left out
    "proxy_413": Step(
        status=413, raw_body="<html><body>413 Request Entity Too Large</body></html>"
    ),
}


def window(case: str) -> Any:
    def step(body: dict[str, Any]) -> Step:
        if len(body["messages"][1]["content"]) > LIMIT:
            return OVERFLOWS[case]
        return sees_the_cheat(body)

    return step


@pytest.mark.parametrize(
    ("case", "env"),
    [("openai", "local"), ("llama_cpp", "local"), ("proxy_413", "local"),
     pytest.param("llama_cpp", "docker", marks=pytest.mark.docker)],
)  # fmt: skip
async def test_a_padded_port_that_overflows_the_judge_counts_0(
    tmp_path: Path, judge: FakeOpenAI, case: str, env: str, request: pytest.FixtureRequest
) -> None:
    """A decorator-only port padded past the judge's window (well within the prompt's
    byte budget). Before: llama_cpp and proxy_413 ended model_failed (left out of the
    mean, retried). After: every overflow is verifier_failed, counted 0."""
    if env == "docker":
        request.getfixturevalue("docker_engine")
    cheat = PROPER.replace("sum(count.map(LINES))", "sum(count.local(line) for line in LINES)")
    padded = cheat + "# " + "padding " * 2_000 + "\n"  # 16 KB
    judge.push(window(case), window(case))
    task = wordcount(tmp_path / "t", {"main.py": padded}, submission='["/app/main.py"]',
                     solve="cp /solution/main.py /app/main.py")  # fmt: skip
    r = await attack_trial(env, task, tmp_path)
    assert (r.outcome, r.counted_reward) == ("verifier_failed", 0.0), (r.outcome, r.error)
    assert (
        r.error is not None
        and "judge" in r.error.message
        and "counts against it" in r.error.message
    )
    assert len(judge.requests) == 1  # asked once: a refusal is not asked again


# -- the prompt's budget, in bytes ----------------------------------------------------------

UNSET = '[[metadata.crucible.stages]]\nkind = "judge"\nmodel = "gpt-4o-mini"\nmax_retries = 0\n'


def judged_task(tmp: Path, url: str, extra: str = "") -> Task:
    from tests.verifiers.test_stages import make_task

    return make_task(tmp / "t", f'{UNSET}base_url = "{url}"\n{extra}')


async def test_the_budget_is_bytes_not_characters(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """30,000 characters of 4-byte text: within the 60,000 characters the judge read
    before (so it was sent), 120 KB, over its byte budget: now refused, unsent."""
    fake_openai.push(sees_the_cheat)
    task = judged_task(tmp_path, fake_openai.url)
    program = PROPER + "# " + "\U0001f600" * 30_000 + "\n"
    v = VerifierResult(rewards={"reward": 1.0})
    with pytest.raises(VerifierFailed, match="over its budget of 64000"):
        await pipeline(task, submitted(tmp_path, program), tmp_path, v=v)
    assert fake_openai.requests == [] and v.stages[-1].status == "error"


# -- a prompt no encoder takes ---------------------------------------------------------------


async def test_a_lone_surrogate_in_the_trace_is_escaped_and_judged(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """A runtime trace holding a lone surrogate (what a program can name a function, or
    print). Before: httpx could not encode the prompt, the stage crashed, and the trial
    ended model_failed (left out). After: the judge reads it escaped, and vetoes."""
    fake_openai.push(sees_the_cheat)
    task = judged_task(tmp_path, fake_openai.url)
    trace = "case 0: status ok\n  count\udcff (function): 3 local calls via count.local(line)"

    async def fetch(paths: list[str]) -> Any:
        return submitted(tmp_path, PROPER)

    from crucible.store.logs import FileLog
    from crucible.verifiers.pipeline import Pipeline

    v = VerifierResult(rewards={"reward": 1.0}, exit_code=0)
    log = FileLog(tmp_path / "trial.log")
    try:
        await Pipeline.for_task(task).run(v, fetch, log, trace=trace)
    finally:
        log.close()
    assert v.stages[-1].status == "vetoed" and v.rewards == {"reward": 0.0, "judge.pass": 0.0}
    assert "count\\xff (function)" in fake_openai.requests[0]["messages"][1]["content"]


# -- whose failure a refused request is ------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, VerifierFailed), (422, VerifierFailed), (413, VerifierFailed),
     (401, ModelFailed), (403, ModelFailed), (404, ModelFailed), (429, ModelFailed),
     (503, ModelFailed)],
)  # fmt: skip
async def test_only_the_endpoints_own_failures_are_model_failed(
    tmp_path: Path, fake_openai: FakeOpenAI, status: int, kind: type[Exception]
) -> None:
    """Auth, a missing route or model, 429 and 5xx are the endpoint's (model_failed, left
    out); any other 4xx was the request's, whose bulk is the submission (counted 0).
    Before: every one of them was model_failed."""
    fake_openai.fail_always = status
    task = judged_task(tmp_path, fake_openai.url)
    with pytest.raises(kind) as err:
        await pipeline(task, submitted(tmp_path, PROPER), tmp_path)
    assert type(err.value) is kind and f"HTTP {status}" in err.value.message


@pytest.mark.parametrize(
    "error",
    [{"code": "context_length_exceeded", "message": "This model's maximum context length is 8192 tokens"},
     {"code": "content_filter", "message": "The prompt was filtered"}],
)  # fmt: skip
async def test_a_200_that_carries_the_prompts_refusal_counts_0(
    tmp_path: Path, fake_openai: FakeOpenAI, error: dict[str, str]
) -> None:
    """A proxy that answers 200 with the error its upstream gave. Before: retried as a
    malformed reply, then model_failed (left out). After: the submission's, counted 0."""
    fake_openai.push(Step(raw_body=json.dumps({"error": error})))
    with pytest.raises(VerifierFailed, match="counts against it"):
        await pipeline(
            judged_task(tmp_path, fake_openai.url), submitted(tmp_path, PROPER), tmp_path
        )


def test_what_of_a_declared_path_counts_as_unseen() -> None:
    """Submission.unseen from the collector's notes: a declared file, or a declared folder's
    .py file, cut or a link; a walk that stopped at or above a declared folder (or above a
    declared file it never reached). Not: a data file or a link that is no .py, in a folder;
    nor notes on files beside a declared file that was read."""
    from crucible.sandboxes.collect.manifest import Collected, Note
    from crucible.verifiers.submission import _unseen

    def rec(*notes: Note) -> list[Collected]:
        return [Collected(src="/app", dst="sandbox/submission/app", notes=list(notes))]

    cut = Note(path="/app/pkg/helper.py", type="file", truncated=True, reason="cut at 1048576")
    link = Note(path="/app/helper.py", type="symlink", reason="not followed")
    data = Note(path="/app/data.bin", type="file", truncated=True, reason="cut")
    stopped = Note(path="/app", type="dir", truncated=True, reason="stopped: 2000 entries")
    assert _unseen("/app/", rec(cut), read=False) == [f"{cut.path}: file {cut.reason}"]
    assert _unseen("/app/pkg/", rec(cut), read=False) and not _unseen("/app/lib/", rec(cut), False)
    assert _unseen("/app/", rec(link), read=False) == [f"{link.path}: symlink {link.reason}"]
    assert _unseen("/app/", rec(data), read=False) == []
    assert _unseen("/app/", rec(stopped), read=False) and _unseen("/app/x/", rec(stopped), False)
    assert _unseen("/app/main.py", rec(stopped), read=False)  # never reached
    assert _unseen("/app/main.py", rec(stopped, cut, link), read=True) == []  # read whole
    main_cut = Note(path="/app/main.py", type="file", truncated=True, reason="cut")
    assert _unseen("/app/main.py", rec(main_cut), read=False)
    assert _unseen("/srv/main.py", rec(main_cut), read=False) == []  # another folder's notes
