"""Provider parameters by name (`--env-param`): the names users of other harnesses know,
documented in `crucible run --help` and the docs, applied by every provider, and an
unknown one refused with the known ones listed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from tests.sandboxes.modal_fixtures import make, spec
from tests.sandboxes.modal_standin import World

from crucible.cli.common import ENV_PARAM_NAMES
from crucible.errors import UnknownKey
from crucible.sandboxes.modal.params import ModalParams
from crucible.sandboxes.overrides import SpecOverrides
from crucible.sandboxes.registry import env_param_names, get_provider, provider_class

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "reference" / "env-params.md"
ASKED = {  # what the issue lists for modal, and "the matching subset" elsewhere
    "modal": {
        "app_name",
        "environment_name",
        "image",
        "named_image",
        "timeout",
        "idle_timeout",
        "cpu",
        "memory",
        "gpu",
        "region",
        "env_variables",
    },
    "docker": {"image", "timeout", "cpu", "memory", "env_variables"},
    "local": {"timeout", "cpu", "memory", "env_variables"},
}
LEGACY = {"environment", "env"}  # modal's own older names, still read


@pytest.mark.parametrize("name", ["local", "docker", "modal"])
def test_help_and_docs_name_exactly_what_each_provider_reads(name: str) -> None:
    reads = set(env_param_names(provider_class(name)) or ()) - LEGACY
    listed = {n.strip() for n in ENV_PARAM_NAMES[name].split(",")}
    assert listed == reads and ASKED[name] <= reads
    page = DOCS.read_text()
    assert all(f"`{n}`" in page for n in reads), sorted(n for n in reads if f"`{n}`" not in page)


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownKey) as exc:
        get_provider("docker", {"memroy": "512"})
    assert "did you mean 'memory'?" in str(exc.value)
    assert "known: compose_timeout, cpu, env_variables, host, image, memory, timeout" in str(
        exc.value
    )


def test_modal_reads_the_names_other_harnesses_use() -> None:
    p = ModalParams.parse({"environment_name": "dev", "env_variables": '{"A": "1"}',
                           "named_image": "team/img", "timeout": "600"})  # fmt: skip
    assert (p.environment, p.env, p.named_image, p.timeout) == ("dev", {"A": "1"}, "team/img", 600)
    with pytest.raises(ValueError, match="not both"):
        ModalParams.parse({"environment_name": "a", "environment": "b"})
    with pytest.raises(ValueError, match="image or named_image"):
        ModalParams.parse({"image": "x", "named_image": "y"})


async def test_modal_named_image_is_looked_up_not_built(standin: tuple[Any, World]) -> None:
    _, world = standin
    provider = await make(standin, named_image="team/eval", environment_name="dev")
    sb = await provider.create(spec(image="debian:12"))
    try:
        assert world.called("Image.from_name") == [{"name": "team/eval", "environment_name": "dev"}]
        assert world.called("Image.build") == [] and world.called("Image.from_registry") == []
        (kw,) = world.called("Sandbox.create")
        assert kw["image"].ref == "named:team/eval"
    finally:
        await sb.close()


def test_overrides_replace_resources_and_add_env_under_the_tasks_own() -> None:
    o = SpecOverrides.parse("local", {"cpu": "2", "memory": "1024", "env_variables": "A=1;B=2"})
    out = o.apply(spec(cpus=1, memory_mb=256, env={"B": "task"}))
    assert (out.cpus, out.memory_mb, out.env) == (2.0, 1024, {"A": "1", "B": "task"})
    for bad, words in (({"cpu": "lots"}, "not a number"), ({"memory": "1"}, "outside"),
                       ({"timeout": "0"}, "outside"), ({"env_variables": "{bad"}, "invalid JSON"),
                       ({"env_variables": "noequals"}, "expected K=v")):  # fmt: skip
        with pytest.raises(ValueError, match=words):
            SpecOverrides.parse("local", bad)


def _crucible(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crucible.cli.main", *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env=dict(os.environ))  # fmt: skip


def _task(root: Path, solve: str, test: str) -> Path:
    d = root / "t"
    for sub in ("solution", "tests"):
        (d / sub).mkdir(parents=True)
    (d / "instruction.md").write_text("Nothing.\n")
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
    (d / "tests" / "test.sh").write_text("#!/bin/bash\n" + textwrap.dedent(test))
    (d / "task.toml").write_text('schema_version = "1.1"\n[verifier]\ntimeout_sec = 30.0\n'
                                 '[environment]\nnetwork_mode = "no-network"\n')  # fmt: skip
    return d


def test_local_sandboxes_get_the_operators_env_and_end_at_their_timeout(tmp_path: Path) -> None:
    task = _task(
        tmp_path,
        "true\n",
        """\
        mkdir -p /logs/verifier
        [ "$CRUCIBLE_T" = from-operator ] && echo 1 > /logs/verifier/reward.txt \\
            || echo 0 > /logs/verifier/reward.txt
        """,
    )
    run = _crucible("run", str(task), "--agent", "oracle", "--jobs-dir", str(tmp_path / "j"),
                    "--env-param", 'env_variables={"CRUCIBLE_T": "from-operator"}', "--json")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["mean_reward"] == 1.0
    # Attack: an agent that would score 0 stalls until the sandbox's life runs out, hoping
    # for a lost sandbox (left out of the mean, retried). It is ended, and it counts 0.
    slow = _task(tmp_path / "slow", "sleep 60\n", "echo 1 > /logs/verifier/reward.txt\n")
    run = _crucible("run", str(slow), "--agent", "oracle", "--jobs-dir", str(tmp_path / "k"),
                    "--env-param", "timeout=2", "--json")  # fmt: skip
    summary = json.loads(run.stdout)
    assert summary["outcomes"] == {"verifier_failed": 1} and summary["n_retries"] == 0, summary
    (trial,) = (tmp_path / "k").glob("*/t__*/result.json")
    assert "reached its timeout of 2s" in json.loads(trial.read_text())["error"]["message"]
