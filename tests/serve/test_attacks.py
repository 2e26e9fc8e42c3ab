"""A submission is an agent: through the service it gains nothing an agent could not.
Forged rewards and a replaced test count 0; nothing inside a sandbox reaches the
service's port, its token or its jobs folder."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path

import pytest
from tests.engine.test_separate_verifier import TOML as SEPARATE
from tests.helpers.serving import Served, Serving, hello_item, write_task

FORGED = "1\n"


def _files(grade_id: str, files: dict[str, str], task: str = "hello") -> dict:
    return {"id": grade_id, "task": {"id": task},
            "submission": {"type": "files", "files": files}}  # fmt: skip


async def test_forged_rewards_and_a_replaced_test_count_zero(tmp_path: Path, serving: Serving):
    task = write_task(tmp_path / "tasks", "hello")
    forged_patch = "--- /dev/null\n+++ b/../logs/verifier/reward.txt\n@@ -0,0 +1 @@\n+1\n"
    async with serving([task]) as s:
        resp = await s.grade(
            _files("reward-txt", {"/logs/verifier/reward.txt": FORGED}),
            _files("reward-json", {"/logs/verifier/reward.json": '{"reward": 1}'}),
            _files("test-sh", {"/tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"}),
            {"id": "patch", "task": {"id": "hello"},
             "submission": {"type": "patch", "patch": forged_patch}},
            hello_item("honest"),  # the control: the honest answer is graded 1
        )  # fmt: skip
        r = {x["id"]: x for x in resp.json()["results"]}
        assert r["honest"]["reward"] == 1.0
        for gid in ("reward-txt", "reward-json", "test-sh", "patch"):
            assert r[gid]["reward"] == 0.0, r[gid]
            assert r[gid]["status"] in ("ok", "invalid"), r[gid]


# Tries every way a sandbox could reach the host's loopback: 127.0.0.1 itself, slirp's
# gateway (10.0.2.2, the host's loopback unless refused), and each host address.
PROBE = r"""
port=$(cat /app/port)
reached=0
for addr in 127.0.0.1 10.0.2.2 $(cat /app/addrs); do
  if timeout 5 bash -c "exec 3<>/dev/tcp/$addr/$port" 2>/dev/null; then
    echo "reached $addr:$port"; reached=1
  fi
done
mkdir -p /logs/verifier
echo $reached > /logs/verifier/reward.txt
echo "probe done"
"""


def _host_addrs() -> str:
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout
    return " ".join(a for a in out.split() if ":" not in a)


@pytest.mark.parametrize("network", ["public", "no-network"])
async def test_nothing_inside_a_sandbox_reaches_the_service(
    tmp_path: Path, serving: Serving, network: str
):
    task = write_task(tmp_path / "tasks", "probe", test=PROBE, network=network)
    async with serving([task]) as s:
        port = s.url.rsplit(":", 1)[1]
        # The probe works: run on the host, it reaches the service.
        (tmp_path / "app").mkdir()
        host_probe = PROBE.replace("/app/", f"{tmp_path}/app/").replace(
            "/logs/verifier", str(tmp_path / "logs"))  # fmt: skip
        (tmp_path / "app" / "port").write_text(port)
        (tmp_path / "app" / "addrs").write_text("")
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", host_probe, stdout=asyncio.subprocess.PIPE)  # fmt: skip
        out, _ = await proc.communicate()
        assert f"reached 127.0.0.1:{port}" in out.decode()
        with socket.create_connection(("127.0.0.1", int(port))):
            pass
        resp = await s.grade(_files("probe", {"/app/port": port, "/app/addrs": _host_addrs()},
                                    task="probe"))  # fmt: skip
        result = resp.json()["results"][0]
        assert (result["status"], result["reward"]) == ("ok", 0.0), result
        assert "probe done" in _test_output(s, result["trial"])  # it ran to its end


def _test_output(s: Served, trial: str) -> str:
    trial_dir = s.service.jobs_dir / trial
    return "".join(p.read_text() for p in trial_dir.rglob("test-stdout.txt"))


LEAK_TEST = r"""
leak=0
mark=$(cat /app/mark)
if env | grep -q "CRUCIBLE_SERVE\|$mark"; then echo "env leaks"; leak=1; fi
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
  if tr '\0' '\n' < "$f" 2>/dev/null | grep -q "CRUCIBLE_SERVE\|$mark"; then
    echo "$f leaks"; leak=1
  fi
done
while read -r p; do
  if [ -e "$p" ]; then echo "$p is visible"; leak=1; fi
done < /app/paths
for d in /tmp /root /home /run /var/tmp /logs /tests; do
  if grep -rqs -- "$mark" "$d" 2>/dev/null; then echo "$d holds the token"; leak=1; fi
done
mkdir -p /logs/verifier
echo $leak > /logs/verifier/reward.txt
echo "leak check done"
"""


async def test_the_token_and_jobs_folder_are_not_visible_inside(
    tmp_path: Path, serving: Serving, monkeypatch: pytest.MonkeyPatch
):
    token = "leakcheck-" + "q7" * 16
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    # A user who exported them for the trainer: the service's own environment holds both.
    monkeypatch.setenv("CRUCIBLE_SERVE_TOKEN", token)
    monkeypatch.setenv("CRUCIBLE_SERVE_TOKEN_FILE", str(token_file))
    task = write_task(tmp_path / "tasks", "leak", test=LEAK_TEST, network="public")
    async with serving([task], token_file=token_file) as s:
        assert s.token == token
        paths = [str(token_file), str(s.service.jobs_dir), str(s.service.job_dir), str(tmp_path)]
        # The mark is the token's first 16 characters: enough to find it, not the token.
        resp = await s.grade(_files("leak", {"/app/mark": token[:16],
                                             "/app/paths": "\n".join(paths) + "\n"},
                                    task="leak"))  # fmt: skip
        result = resp.json()["results"][0]
        assert (result["status"], result["reward"]) == ("ok", 0.0), result
        assert "leak check done" in _test_output(s, result["trial"])


ANSWER_TEST = (
    'mkdir -p /logs/verifier; [ "$(cat /app/answer.txt 2>/dev/null)" = 42 ]'
    " && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
)


async def test_a_separate_verifier_grades_only_what_the_submission_handed_in(
    tmp_path: Path, serving: Serving
):
    task = write_task(tmp_path / "tasks", "sep", test=ANSWER_TEST)
    (task / "task.toml").write_text(SEPARATE)  # artifacts = ["/app/answer.txt"]
    async with serving([task]) as s:
        resp = await s.grade(
            _files("right", {"/app/answer.txt": "42"}, task="sep"),
            _files("forged", {"/app/answer.txt": "41", "/logs/verifier/reward.txt": FORGED,
                              "/tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n"},
                   task="sep"),
        )  # fmt: skip
        r = {x["id"]: x for x in resp.json()["results"]}
        assert (r["right"]["status"], r["right"]["reward"]) == ("ok", 1.0)
        assert (r["forged"]["status"], r["forged"]["reward"]) == ("ok", 0.0)
        assert s.service.metrics.sandboxes_started == 4  # each grade's two sandboxes
