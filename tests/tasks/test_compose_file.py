"""Reading a compose file (no engine needed): Compose's interpolation, the service
fields crucible applies, and the refusals, each naming its field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from crucible.errors import TaskInvalid
from crucible.tasks.compose import MAIN_IMAGE_VAR, ComposeFile, load_compose
from crucible.tasks.compose_fields import Condition, interpolate


def load(tmp_path: Path, text: str, **variables: str) -> ComposeFile:
    env = tmp_path / "environment"
    env.mkdir(exist_ok=True)
    path = env / "docker-compose.yaml"
    path.write_text(textwrap.dedent(text))
    return load_compose(path, {"MAIN_IMAGE_NAME": MAIN_IMAGE_VAR, **variables})


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("${A}", "a"),
        ("$A-$A", "a-a"),
        ("${UNSET:-dflt}", "dflt"),
        ("${EMPTY:-dflt}", "dflt"),
        ("${EMPTY-dflt}", ""),
        ("${A:-dflt}", "a"),
        ("$$A costs $$5", "$A costs $5"),
        ("no variables", "no variables"),
    ],
)
def test_interpolation_follows_compose(text: str, want: str) -> None:
    assert interpolate(text, {"A": "a", "EMPTY": ""}, Path("e/c.yaml"), "x") == want


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("${UNSET:?}", "${UNSET} is required"),
        ("${EMPTY:?needs a value}", "needs a value"),
        ("${A", "invalid interpolation"),
    ],
)
def test_an_unresolvable_variable_is_task_invalid_naming_it(text: str, said: str) -> None:
    with pytest.raises(TaskInvalid) as info:
        interpolate(text, {"A": "a", "EMPTY": ""}, Path("e/c.yaml"), "services.db.command")
    assert "services.db.command" in info.value.message and said in info.value.message


@pytest.mark.parametrize("text", ["${UNSET}", "$UNSET", "x${UNSET}y"])
def test_a_variable_without_a_value_is_an_empty_string_as_compose_gives(text: str) -> None:
    # Compose substitutes "" (with a warning) for a variable it has no value for, and
    # Harbor runs the file through Compose. Before, crucible refused the task.
    want = text.replace("${UNSET}", "").replace("$UNSET", "")
    assert interpolate(text, {}, Path("e/c.yaml"), "services.db.command") == want


def test_the_fields_crucible_applies(tmp_path: Path) -> None:
    got = load(
        tmp_path,
        """
        x-common: &common
          image: base
        services:
          main:
            image: ${MAIN_IMAGE_NAME}
            depends_on:
              db: {condition: service_healthy}
              init: {condition: service_completed_successfully}
            environment: [FROM_HOST, "K=v"]
          db:
            <<: *common
            command: serve --port 1
            entrypoint: ["/bin/sh", "-c"]
            environment: {N: 3, B: true, GONE: null}
            healthcheck:
              test: pg_isready
              interval: 1m30s
              timeout: 500ms
              start_period: 2
              retries: 4
            deploy: {resources: {limits: {memory: 1g, cpus: "0.5", pids: 50}}}
            volumes: [/var/lib/data]
            tmpfs: /run
            user: "1000:1000"
            labels: {role: db}
            expose: ["5432"]
            restart: unless-stopped
          init:
            image: base
            depends_on: [db]
        """,
        FROM_HOST="host-value",
        DB_IMAGE="unused",
    )
    assert got.main.environment == {"FROM_HOST": "host-value", "K": "v"}
    assert got.main.depends_on == {"db": Condition.healthy, "init": Condition.completed}
    db = got.sidecars["db"]
    assert (db.image, db.command, db.entrypoint) == ("base", "serve --port 1", ["/bin/sh", "-c"])
    assert db.environment == {"N": "3", "B": "true"}
    assert db.healthcheck is not None
    assert db.healthcheck.test == ["CMD-SHELL", "pg_isready"]
    assert db.healthcheck.interval_ns == 90 * 10**9
    assert db.healthcheck.timeout_ns == 500 * 10**6
    assert db.healthcheck.start_period_ns == 2 * 10**9
    assert (db.memory_mb, db.cpus, db.pids_limit) == (1024, 0.5, 50)
    assert (db.volumes, db.tmpfs, db.user, db.labels) == (
        ["/var/lib/data"],
        ["/run"],
        "1000:1000",
        {"role": "db"},
    )
    assert got.start_order() == ["db", "init", "main"]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("services:\n  db: {image: x}\nvolumes: {data: {}}\n", "volumes"),
        ("services:\n  db: {image: x, volumes: ['data:/var/lib']}\n", "services.db.volumes[0]"),
        ("services:\n  db: {image: x, volumes: ['./here:/there']}\n", "services.db.volumes[0]"),
        ("services:\n  db: {command: [sleep, '1']}\n", "services.db"),
        ("services:\n  db: {image: x, depends_on: [cache]}\n", "services.db.depends_on"),
        (
            "services:\n  a: {image: x, depends_on: [b]}\n  b: {image: x, depends_on: [a]}\n",
            "services.a.depends_on",
        ),
        (
            "services:\n  db: {image: x, depends_on: {main: {condition: sometime}}}\n",
            "services.db.depends_on.main.condition",
        ),
        ("services:\n  db: {image: x, healthcheck: {test: [true]}}\n", "services.db.healthcheck"),
        (
            "services:\n  db: {image: x, healthcheck: {test: [CMD, x], interval: soon}}\n",
            "services.db.healthcheck.interval",
        ),
        ("services:\n  db: {image: x, mem_limit: lots}\n", "services.db.mem_limit"),
        ("services:\n  db: {image: x, deploy: {replicas: 3}}\n", "services.db.deploy"),
        ("services:\n  db: {build: {context: ., network: host}}\n", "services.db.build.network"),
        ("services:\n  db: {build: {dockerfile: ../Dockerfile}}\n", "services.db.build.dockerfile"),
        ("services:\n  main: {build: ./other}\n", "services.main.build"),
        ("services:\n  main: {image: debian}\n", "services.main.image"),
        ("services: [main]\n", "services"),
    ],
)
def test_what_is_refused_is_named(tmp_path: Path, text: str, where: str) -> None:
    (tmp_path / "environment" / "other").mkdir(parents=True)
    (tmp_path / "environment" / "Dockerfile").write_text("FROM base\n")
    with pytest.raises(TaskInvalid) as info:
        load(tmp_path, text)
    assert f"docker-compose.yaml: {where}" in info.value.message


def test_main_may_restate_the_tasks_own_image_or_build(tmp_path: Path) -> None:
    (tmp_path / "environment").mkdir()
    (tmp_path / "environment" / "Dockerfile").write_text("FROM base\n")
    env = str((tmp_path / "environment").resolve())
    for main in ("build: .", "build: {context: '${CONTEXT_DIR}'}", "image: ${MAIN_IMAGE_NAME}"):
        got = load(tmp_path, f"services:\n  main:\n    {main}\n", CONTEXT_DIR=env)
        assert got.sidecars == {}
