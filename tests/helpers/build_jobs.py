"""Tasks whose image is built from a tiny Dockerfile, and what a build leaves on the
machine: the step processes it ran (found in /proc by their unique names), Buildah's
working containers and the Docker engine's build containers.

The Dockerfiles start FROM the base image both tools have (debian:bookworm-slim) and
write a nonce first, so that every build makes layers of its own and its working
containers are told apart from those of every other build on this machine by their
image's history."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from pathlib import Path

from crucible.sandboxes.buildgate import END_STAMP, START_STAMP
from crucible.sandboxes.docker.build import env_tag
from crucible.sandboxes.local import builduser
from crucible.tasks.loader import load_task, tree_digest
from crucible.tasks.models import Task

BASE = "debian:bookworm-slim"


def image_task(root: Path, steps: str) -> Task:
    """A task built from `FROM BASE`, a nonce step, then `steps`; nop scores it 0."""
    root.mkdir(parents=True)
    (root / "task.toml").write_text(
        'schema_version = "1.1"\n[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n'
        '[environment]\nnetwork_mode = "no-network"\nbuild_timeout_sec = 600.0\n'
    )
    (root / "instruction.md").write_text("Nothing to do.\n")
    env = root / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(
        f"FROM {BASE}\nRUN echo {secrets.token_hex(8)} > /nonce\n{steps}\n"
    )
    for sub, name, body in (
        ("tests", "test.sh", "echo 0 > /logs/verifier/reward.txt"),
        ("solution", "solve.sh", "true"),
    ):
        (root / sub).mkdir()
        (root / sub / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
    return load_task(root)


def blocking_step(tag: str) -> tuple[str, str]:
    """A RUN step that blocks in a process named uniquely: (the step, the name)."""
    name = f"/tmp/blocked-{tag}-{secrets.token_hex(4)}"
    return f"RUN cp /bin/sleep {name} && echo STARTED && {name} 86400", name


def running(name: str) -> list[int]:
    """Host pids whose command line starts with `name`."""
    pids = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "cmdline").read_bytes().startswith(name.encode()):
                pids.append(int(d.name))
        except OSError:
            continue  # gone meanwhile
    return pids


def kill_all(name: str) -> None:
    """Never leave a step behind, even when the test fails."""
    import os

    for pid in running(name):
        os.kill(pid, 9)


def nonce_of(task: Task) -> str:
    """The nonce the task's first step writes (image_task)."""
    found = re.search(
        r"RUN echo ([0-9a-f]{16}) > /nonce", (task.environment_dir / "Dockerfile").read_text()
    )
    assert found is not None
    return found.group(1)


def _buildah(*args: str) -> str:
    """Buildah on the store crucible's local builds use (the build user's, run by root)."""
    user = builduser.find_user()
    argv = [*(user.prefix() if user else []), "buildah", *args]
    res = subprocess.run(
        argv, env=user.env() if user else None, capture_output=True, text=True, check=True
    )
    return res.stdout


def working_containers() -> set[str]:
    """The ids of the working containers in the build store."""
    return {str(r["id"]) for r in json.loads(_buildah("containers", "--json") or "[]") or []}


def made_by(task: Task, ids: set[str]) -> list[str]:
    """Those of `ids` made by a build of `task`: their image's history has its nonce."""
    nonce, ours = nonce_of(task), []
    for cid in sorted(ids):
        try:
            history = _buildah("inspect", "--type", "container", "--format",
                               "{{range .History}}{{.CreatedBy}}\n{{end}}", cid)  # fmt: skip
        except subprocess.CalledProcessError:
            continue  # removed meanwhile (another build's)
        if nonce in history:
            ours.append(cid)
    return ours


def remove_working_containers(ids: list[str]) -> None:
    for cid in ids:
        _buildah("rm", cid)


def docker_build_containers(name: str) -> list[str]:
    """The engine's containers (any state) whose command names `name`."""
    res = subprocess.run(
        ["docker", "ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Command}}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [line.split()[0] for line in res.stdout.splitlines() if name in line]


def remove_images(tasks: list[Task]) -> None:
    """The images these tasks' builds made, in Buildah's storage and the engine's."""
    tags = [env_tag(t.environment_digest or tree_digest(t.path / "environment")) for t in tasks]
    subprocess.run(["buildah", "rmi", "-f", *(f"localhost/{t}" for t in tags)], capture_output=True)
    subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True)


def max_overlap(logs: list[Path]) -> int:
    """The most builds that ran at once, from the start and end stamps in their logs."""
    events: list[tuple[int, int]] = []
    for path in logs:
        for line in path.read_text(errors="replace").splitlines():
            for stamp, step in ((START_STAMP, 1), (END_STAMP, -1)):
                if line.startswith(stamp + " "):
                    events.append((int(line.split()[-1]), step))
    most = now = 0
    for _, step in sorted(events):  # at one instant an end (-1) sorts before a start
        now += step
        most = max(most, now)
    return most
