"""A submission is an agent (issue 26, item 7): every attack an agent could make, made as
a submission in a real trial (local provider; docker too where marked), gains nothing.
The honest test gives 1 only when /app/ok exists, which no attack here makes: each must
end graded 0 (or refused as invalid_submission, which is 0 too), and nothing outside the
sandbox may be written.

Before agents/submission.py applied patches itself (git apply / patch in the sandbox), on
local: a patch creating /tmp/x or renaming a file to ../../tmp/x applied (outside the
workdir, no error); one making a link (mode 120000) into /tmp/secret/shadow applied; 20,000
unvalidated files ran the agent phase out (timeout) instead of being refused; on docker
(no git or patch in the image) every patch was invalid. Planted rewards, tests, shell start
files, replaced tools and odd names already scored 0 (the grader's resets and kit).
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from pydantic import ValidationError
from tests.helpers.attack_tasks import HONEST_TEST
from tests.helpers.submission_tasks import agent_error, submission_task, submit

from crucible.agents.submission import SubmissionAgent
from crucible.records.submission import SUBMISSION, FilesSubmission
from crucible.records.trial import TrialResult

WIN = "#!/bin/sh\ntouch /app/ok; echo 1 > /logs/verifier/reward.txt\n"
INVALID = "invalid_submission"


def gained_nothing(r: TrialResult, *host_paths: Path) -> None:
    """Graded 0 (never a 1, never an excluded error), and no host path written."""
    assert (r.outcome, r.reward, r.counted_reward) == ("graded", 0.0, 0.0), (
        r.error,
        r.agent_result,
    )
    for path in host_paths:
        assert not path.exists(), f"{path} was written on the host"


def _files(files: dict[str, str]) -> dict[str, object]:
    return {"type": "files", "files": files}


def _new_file_patch(name: str, text: str = "owned\n") -> dict[str, object]:
    body = "".join(f"+{line}\n" for line in text.splitlines())
    return {
        "type": "patch",
        "patch": f"--- /dev/null\n+++ {name}\n@@ -0,0 +1,{len(text.splitlines())} @@\n{body}",
    }


REWARD_FILES = {
    "reward.txt": _files({"/logs/verifier/reward.txt": "1\n"}),
    "reward.json": _files({"/logs/verifier/reward.json": '{"reward": 1}\n'}),
    "both and a stale ctrf": _files(
        {
            "/logs/verifier/reward.txt": "1",
            "/logs/verifier/reward.json": '{"reward": 1.0}',
            "/logs/verifier/ctrf.json": '{"results": {"summary": {"passed": 1, "failed": 0}}}',
        }
    ),
    "tests/test.sh": _files({"/tests/test.sh": WIN}),
    "a tests helper": _files({"/tests/lib.sh": "check() { true; }\n"}),
}


@pytest.mark.parametrize("attack", sorted(REWARD_FILES))
async def test_planted_rewards_and_tests_never_count(
    tmp_path: Path, provider_env: str, attack: str
) -> None:
    test = ". /tests/lib.sh; if check; then echo 1; else echo 0; fi > /logs/verifier/reward.txt"
    lib = {"tests/lib.sh": "check() { [ -f /app/ok ]; }\n"}
    task = submission_task(tmp_path / "t", test=test, files=lib)
    r = await submit(provider_env, task, tmp_path, REWARD_FILES[attack])
    gained_nothing(r)
    verifier = tmp_path / "job" / r.trial_name / "sandbox" / "logs" / "verifier"
    assert (verifier / "reward.txt").read_text().strip() == "0"
    assert not (verifier / "reward.json").exists()


def _escapes(tag: str) -> dict[str, dict[str, object]]:
    return {
        "../../etc": _new_file_patch(f"b/../../etc/{tag}"),
        "deep ..": _new_file_patch("b/x/" + "../" * 40 + f"tmp/{tag}"),
        "absolute": _new_file_patch(f"/tmp/{tag}"),
        "quoted ..": _new_file_patch(f'"b/\\056\\056/\\056\\056/tmp/{tag}"'),
        "git rename out": {
            "type": "patch",
            "patch": "diff --git a/seed.txt b/seed.txt\nsimilarity index 100%\n"
            f"rename from seed.txt\nrename to ../../tmp/{tag}\n",
        },
    }


@pytest.mark.parametrize("attack", sorted(_escapes("x")))
async def test_patch_paths_out_of_the_workdir_are_refused(
    tmp_path: Path, provider_env: str, attack: str
) -> None:
    tag = f"crucible-owned-{secrets.token_hex(4)}"
    task = submission_task(tmp_path / "t", seed={"/app/seed.txt": "seed\n"})
    r = await submit(provider_env, task, tmp_path, _escapes(tag)[attack])
    gained_nothing(r, Path("/etc") / tag, Path("/tmp") / tag)
    assert agent_error(r) == INVALID


SHADOW = "root:$6$secret-hash:19000:0:99999:7:::\n"


def _link_patch() -> dict[str, object]:
    return {
        "type": "patch",
        "patch": "diff --git a/app.txt b/app.txt\nnew file mode 120000\nindex 0000000..1111111\n"
        "--- /dev/null\n+++ b/app.txt\n@@ -0,0 +1 @@\n+/tmp/secret/shadow\n\\ No newline at end of file\n",
    }


async def test_a_patch_that_makes_a_link_is_refused(tmp_path: Path, provider_env: str) -> None:
    task = submission_task(tmp_path / "t", seed={"/tmp/secret/shadow": SHADOW})
    r = await submit(provider_env, task, tmp_path, _link_patch())
    gained_nothing(r)
    assert agent_error(r) == INVALID
    assert r.agent_result is not None and "symbolic link" in str(r.agent_result.error)


@pytest.mark.parametrize("via", ["file link", "folder link"])
async def test_a_patch_through_a_link_the_workdir_holds_is_refused(
    tmp_path: Path, provider_env: str, via: str
) -> None:
    # The environment left links to a root-only file and to a folder outside the workdir:
    # patching through them would read that file into the workdir, or write outside it.
    links = {"/app/app.txt": "/tmp/secret/shadow", "/app/etc": "/tmp/secret"}
    task = submission_task(tmp_path / "t", seed={"/tmp/secret/shadow": SHADOW}, links=links)
    if via == "file link":
        patch = f"--- a/app.txt\n+++ b/app.txt\n@@ -1 +1 @@\n-{SHADOW}+copied\n"
    else:
        patch = "--- /dev/null\n+++ b/etc/new\n@@ -0,0 +1 @@\n+planted\n"
    r = await submit(provider_env, task, tmp_path, {"type": "patch", "patch": patch})
    gained_nothing(r)
    assert agent_error(r) == INVALID
    assert r.agent_result is not None and r.agent_result.error is not None
    assert (
        "a link" if via == "file link" else "leads out of the workdir"
    ) in r.agent_result.error.message


def test_huge_names_deep_paths_and_a_million_files_are_refused_before_anything_starts() -> None:
    for files in (
        {"/app/" + "n" * 256: "x"},
        {"/app" + "/d" * 10_000 + "/f": "x"},
        {f"/app/f{i}": "" for i in range(1_000_000)},
        {"/app/\x00nul": "x"},
        {"/app/../etc/x": "x"},
    ):
        with pytest.raises(ValidationError):
            SUBMISSION.validate_python(_files(files))


@pytest.mark.parametrize("shape", ["huge name", "deep path", "many files"])
async def test_unvalidated_oversized_submissions_are_refused_in_the_sandbox(
    tmp_path: Path, shape: str
) -> None:
    # Built without validation (model_construct): the agent checks the caps again.
    files = {
        "huge name": {"/app/" + "n" * 300: WIN},
        "deep path": {"/app" + "/d" * 10_000 + "/ok": ""},
        "many files": {f"/app/f{i}": "" for i in range(20_000)} | {"/app/ok": ""},
    }[shape]
    agent = SubmissionAgent(FilesSubmission.model_construct(type="files", files=files))
    r = await submit("local", submission_task(tmp_path / "t"), tmp_path, agent)
    gained_nothing(r)
    assert agent_error(r) == INVALID


async def test_names_with_newlines_and_control_characters(
    tmp_path: Path, provider_env: str
) -> None:
    # Odd names an agent's process could make: written as they are, and worth nothing.
    names = [
        "/app/ok\n",
        "/app/new\nline",
        "/app/\x1b[31mred\x1b[0m",
        "/app/tab\there",
        "/app/\x7f\x01",
    ]
    task = submission_task(tmp_path / "t")
    r = await submit(provider_env, task, tmp_path, _files({n: WIN for n in names}))
    gained_nothing(r)
    assert agent_error(r) is None


PLANTS = {
    "root bashrc": "/root/.bashrc",
    "root profile": "/root/.profile",
    "profile.d": "/etc/profile.d/zz-crucible.sh",
    "bash.bashrc": "/etc/bash.bashrc",
    "etc environment": "/etc/environment",
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
async def test_planted_shell_start_files_never_run_for_grading(
    tmp_path: Path, provider_env: str, plant: str
) -> None:
    # A files submission cannot run anything itself; what it plants for a shell to run
    # later (a background loop rewriting the reward) must never run during grading.
    loop = "( while :; do touch /app/ok; echo 1 > /logs/verifier/reward.txt; done ) &\n"
    env_line = "BASH_ENV=/app/evil.sh\n"
    text = env_line if plant == "etc environment" else loop
    sub = _files({PLANTS[plant]: text, "/app/evil.sh": loop})
    r = await submit(provider_env, submission_task(tmp_path / "t"), tmp_path, sub)
    gained_nothing(r)  # local: /etc and /root read-only (invalid); docker: written, never run


@pytest.mark.parametrize("target", ["/usr/bin/bash", "/bin/sh", "/usr/bin/cmp", "/usr/bin/env"])
async def test_replacing_a_system_tool_gains_nothing(
    tmp_path: Path, provider_env: str, target: str
) -> None:
    task = submission_task(tmp_path / "t", test=HONEST_TEST)
    r = await submit(provider_env, task, tmp_path, _files({target: WIN}))
    gained_nothing(r)


@pytest.mark.docker
@pytest.mark.parametrize("attack", ["read a root-only file", "write a root-owned path"])
async def test_a_submission_has_the_agent_users_rights_only(
    tmp_path: Path, docker_engine: None, attack: str
) -> None:
    # [agent] user = nobody: a patch must not copy a root-only file's lines into the
    # workdir (its read is the agent user's, and fails), nor write where nobody may not.
    secret = "root-only\n"
    task = submission_task(
        tmp_path / "t",
        agent_user="nobody",
        seed={"/app/secret.txt": secret, "/app/mine.txt": "mine\n"},
        then="chmod 600 /app/secret.txt && chmod 1777 /app && chown nobody /app/mine.txt",
    )
    if attack == "read a root-only file":
        patch = f"--- a/secret.txt\n+++ b/secret.txt\n@@ -1 +1,2 @@\n {secret}+more\n"
        sub: dict[str, object] = {"type": "patch", "patch": patch}
    else:
        sub = _files({"/app/mine.txt": "fine\n", "/etc/crucible-planted": WIN})
    r = await submit("docker", task, tmp_path, sub)
    gained_nothing(r)
    assert agent_error(r) == INVALID
    assert r.agent_result is not None and r.agent_result.error is not None
    message = r.agent_result.error.message
    assert (
        "Permission denied" in message
        and ("secret.txt" if "read" in attack else "/etc/") in message
    )


@pytest.mark.parametrize("shape", ["over the read cap", "not UTF-8"])
async def test_a_patch_on_a_file_it_cannot_read_whole_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    # A read cut at the exec's output cap, or decoded with replacement characters, would
    # write back a file that is not the one patched: refused, the file left as it was.
    monkeypatch.setattr("crucible.agents.submission.MAX_READ_BYTES", 1000)
    big = "".join(f"{n}\n" for n in range(1000))
    task = submission_task(
        tmp_path / "t",
        seed={"/app/f.txt": big},
        then="printf 'caf\\351\\n' > /app/latin1.txt",
    )
    name, old = ("f.txt", "0") if shape == "over the read cap" else ("latin1.txt", "caf\ufffd")
    patch = f"--- a/{name}\n+++ b/{name}\n@@ -1 +1 @@\n-{old}\n+changed\n"
    r = await submit("local", task, tmp_path, {"type": "patch", "patch": patch})
    gained_nothing(r)
    assert agent_error(r) == INVALID
    assert r.agent_result is not None and r.agent_result.error is not None
    why = "over 1000 bytes" if shape == "over the read cap" else "not UTF-8"
    assert why in r.agent_result.error.message
