"""A separate verifier sandbox (environment_mode = "separate"), on real local and docker
sandboxes: it sees only the collected paths, and an attempt that tampers with its own
sandbox cannot change the verifier's result either way: a wrong answer stays 0, a right
one stays 1, whatever was planted, replaced, moved or left running."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.attack_tasks import attack_task, attack_trial

from crucible.records.trial import TrialResult
from crucible.tasks.loader import load_task

VERIFIER_ENV = """[verifier.environment]
docker_image = "debian:bookworm-slim"
network_mode = "no-network"
"""
TOML = (
    """schema_version = "1.1"
artifacts = ["/app/answer.txt"]
[agent]
timeout_sec = 60
[verifier]
timeout_sec = 60
environment_mode = "separate"
"""
    + VERIFIER_ENV
    + """[environment]
docker_image = "debian:bookworm-slim"
network_mode = "no-network"
"""
)

# The honest verifier: perl (with a module), cat, grep and bash all have their say.
HONEST = (
    'perl -Mstrict -e 1 && [ "$(cat /app/answer.txt)" = 42 ] && grep -qx 42 /app/answer.txt'
    " && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt"
)

# Each attack runs after the agent wrote its answer; `|| true`: on local, /usr, /bin and
# /etc are read-only binds of the host, so some plants fail there (the test must hold anyway).
ATTACKS = {
    "planted_reward": "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt",
    "planted_tests": (
        "mkdir -p /tests && printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh"
    ),
    "bin_replaced": (
        "{ printf '#!/bin/sh\\necho 42\\n' > /usr/bin/cat && "
        "printf '#!/bin/sh\\nexit 0\\n' > /usr/bin/grep; } 2>/dev/null || true"
    ),
    "module_shadowed": (
        # perl's @INC starts at /etc/perl: a strict.pm there writes the reward and kills test.sh.
        "{ mkdir -p /etc/perl && printf 'package strict; sub import {}; "
        'open(my $f, ">", "/logs/verifier/reward.txt"); print $f "1\\\\n"; close $f; '
        "kill 9, getppid(); 1;\\n' > /etc/perl/strict.pm; } 2>/dev/null || true"
    ),
    "loader_moved": (
        "{ mv /lib64/ld-linux-x86-64.so.2 /lib64/gone.so.2 || "
        "rm -f /lib64/ld-linux-x86-64.so.2; } 2>/dev/null || true"
    ),
    "process_left_running": (
        "nohup sh -c 'while :; do mkdir -p /logs/verifier /tests; "
        "echo 1 > /logs/verifier/reward.txt; "
        'echo "echo 1 > /logs/verifier/reward.txt" > /tests/test.sh; '
        "sleep 0.05; done' >/dev/null 2>&1 &"  # timing-ok: the attack's own loop, in the sandbox
    ),
}


def _solve(answer: int, attack: str) -> str:
    # The loader goes last: nothing dynamically linked runs after it.
    return f"echo {answer} > /app/answer.txt\n{ATTACKS[attack]}\n"


async def _run(
    env: str, tmp_path: Path, answer: int, attack: str, mode: str = "separate"
) -> TrialResult:
    task = attack_task(tmp_path / f"t{answer}", solve=_solve(answer, attack), test=HONEST)
    toml = TOML if mode == "separate" else TOML.replace(VERIFIER_ENV, "").replace("separate", mode)
    (task.path / "task.toml").write_text(toml)
    return await attack_trial(env, load_task(task.path), tmp_path / f"r{answer}")


def _reward(r: TrialResult) -> tuple[str, float | None]:
    return r.outcome, r.reward


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("env", ["local", pytest.param("docker", marks=pytest.mark.docker)])
async def test_tampering_cannot_change_the_separate_verifiers_result(
    env: str, attack: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if env == "docker":
        request.getfixturevalue("docker_engine")
    wrong = await _run(env, tmp_path, 41, attack)
    assert _reward(wrong) == ("graded", 0.0)
    assert _reward(await _run(env, tmp_path, 42, attack)) == ("graded", 1.0)
    if env == "docker" and attack == "bin_replaced":  # read from the agent's sandbox, still
        assert wrong.tamper is not None and not wrong.tamper.zeroed  # nothing of it graded
        assert [f"{c.kind} {c.path}" for c in wrong.tamper.reaching] == [
            "modified /usr/bin/cat",
            "modified /usr/bin/grep",
        ]


@pytest.mark.docker
@pytest.mark.parametrize("attack", ["bin_replaced", "module_shadowed"])
async def test_the_same_attacks_fool_a_shared_verifier_on_docker(
    attack: str, tmp_path: Path, docker_engine: None
) -> None:
    # The control: in the agent's own (writable) container these plants do reach test.sh,
    # which is why a task that must not trust its sandbox asks for a separate verifier.
    result = await _run("docker", tmp_path, 41, attack, mode="shared")
    assert result.outcome == "graded" and result.reward == 1.0
    assert result.tampered_paths  # the tampering is on the record
