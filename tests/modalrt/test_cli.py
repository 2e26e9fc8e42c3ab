"""`crucible modal run` on small Modal programs, as a subprocess: the program's output,
its exit code, and the trace each feature leaves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def test_every_remote_call_form_runs_in_containers(modal_run: Any) -> None:
    r = modal_run("fanout.py", "--n", "4")
    assert r.code == 0, r.stderr
    assert r.stdout.splitlines() == [
        "remote 9",
        "map [0, 1, 4, 9]",
        "starmap [30, 70]",
        "gather [0, 1, 4]",
        "get 81",
        # .local ran here (CALLS 1); the remote inputs changed only the containers' CALLS
        "local 4 caller CALLS 1",
        "other process True",
        "mode as imported",  # the container imported the program; the caller's change stays here
        "nested 5",
        "from_id 121",
        "aio [9, [1, 4], [3], 25, [36]]",
        "seen [1, 2, 3, 7, 8, 100]",
    ]
    assert r.trace["status"] == "ok"
    square = r.fn("square")
    assert square["ran_remotely"] and square["local_calls"] == 1
    assert square["inputs_by_call"] == {"remote": 2, "map": 6, "spawn": 7}
    assert square["resources"]["gpu"] == "A10G" and square["gpu_backing"] == "cpu"
    assert square["gpu_inputs"] == {"A10G": 15}
    assert 1 <= square["containers"] <= 2  # max_containers=2
    assert r.fn("add")["inputs_by_call"] == {"starmap": 3, "remote": 1}
    assert r.fn("nested")["inputs_by_call"] == {"remote": 1}
    assert r.fn("record")["inputs_by_call"] == {"for_each": 4, "spawn_map": 2}
    ev = r.trace["evidence"]
    assert r.trace["entry_kind"] == "local_entrypoint"
    assert all(ev[k] for k in ("function", "local_entrypoint", "gpu", "retries", "fan_out"))
    assert ev["spawn"] and ev["dict"]
    assert not any(ev[k] for k in ("cls_lifecycle", "volume", "secret", "web_endpoint", "queue"))


def test_classes_lifecycle_parameters_and_batching(modal_run: Any, state: Path) -> None:
    r = modal_run("classes.py")
    assert r.code == 0, r.stderr
    assert r.stdout.splitlines() == [
        "predict 21",
        "map [31, 32, 33]",
        "local 51",
        "batched [0, 2, 4, 6, 8, 10, 12, 14]",
        "unbound True",  # as the SDK: methods need an instance
        "with_options 40",
    ]
    predict = r.fn("Model.predict")
    assert predict["type"] == "method" and predict["resources"]["gpu"] == "T4"
    assert predict["remote_inputs"] == 5 and predict["local_calls"] == 1
    assert predict["containers"] == 3  # one per parameter set and options
    assert predict["gpu_inputs"] == {"T4": 4, "A100": 1}
    assert r.fn("Model")["type"] == "cls"
    from tests.modalrt.stores import queue_items

    events = queue_items(state, "cls-events")
    # enter ran in each container and locally; exit ran when each container stopped
    assert sorted(events) == [
        "enter 2",
        "enter 3",
        "enter 4",
        "enter 5",
        "exit 2",
        "exit 3",
        "exit 4",
    ]
    batches = queue_items(state, "cls-batches")
    assert sum(batches) == 8 and max(batches) <= 4
    assert r.fn("Batcher.double")["remote_inputs"] == 8
    ev = r.trace["evidence"]
    assert all(ev[k] for k in ("cls_lifecycle", "batched", "concurrent_inputs", "queue", "gpu"))
    assert ev["fan_out"] and not ev["function"]  # .map on a method; no plain function ran


def test_volumes_secrets_dicts_and_queues(modal_run: Any, state: Path, tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.toml"
    secrets.write_text('[api-keys]\nAPI_KEY = "k-123"\n')
    r = modal_run("storage.py", options=("--secrets", str(secrets)))
    assert r.code == 0, r.stderr
    assert r.stdout.splitlines() == [
        "load step=7",
        "files ['model.txt']",
        "env ['yes', 'k-123', 'dot']",
        "caller sees secret None",
        "consumed 10",
        "dict [1, 2] 1 True",
    ]
    assert (state / "volumes" / "ckpt" / "model.txt").read_text() == "step=7"
    assert r.trace["volume_ops"] == {"ckpt": {"commit": 1, "reload": 1}}
    assert r.fn("save")["resources"]["volumes"] == {"/ckpt": "ckpt"}
    assert r.fn("env")["resources"]["secrets"] == ["from_dict", "api-keys", "dotenv:.env"]
    ev = r.trace["evidence"]
    assert ev["volume"] and ev["secret"] and ev["dict"] and ev["queue"] and ev["spawn"]


def test_a_missing_named_secret_fails_the_program(modal_run: Any) -> None:
    r = modal_run("storage.py")  # HOME has no ~/.crucible/secrets.toml
    assert r.code == 1
    assert "NotFoundError: Secret 'api-keys' not found" in r.stderr
    assert r.trace["status"] == "failed"


def test_web_endpoints_answer_over_http(modal_run: Any) -> None:
    pytest.importorskip("fastapi")
    r = modal_run("web.py")
    assert r.code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert json.loads(lines[0].removeprefix("fastapi ")) == {"key": "abcd", "value": 4}
    assert json.loads(lines[1].removeprefix("asgi ")) == {"path": "/hello"}
    assert lines[2] == "wsgi wsgi q=1"
    assert r.fn("lookup")["resources"]["web"] == "fastapi"
    assert r.fn("lookup")["inputs_by_call"] == {"web": 1}
    assert r.trace["evidence"]["web_endpoint"] and r.trace["evidence"]["image_build"]


def test_cuda_code_on_a_gpu_function_ends_as_needs_a_gpu(modal_run: Any) -> None:
    r = modal_run("gpu_needed.py")
    # The program hid the failure and printed a wrong answer; the run still needs a GPU.
    assert r.stdout.strip() == "loss 0.0"
    assert r.code == 6
    assert "needs a GPU: train" in r.stderr
    assert r.trace["status"] == "needs_gpu"
    train = r.fn("train")
    assert train["needs_gpu"] and train["gpu_backing"] == "cpu"


def test_a_decorator_only_program_never_runs_the_gpu_function_remotely(modal_run: Any) -> None:
    r = modal_run("decorator_only.py::main")
    assert r.code == 0, r.stderr
    assert r.stdout.splitlines() == ["rank 2", "rank 1"]
    compute = r.fn("compute")
    assert compute["resources"]["gpu"] == "A100"
    assert not compute["ran_remotely"] and compute["remote_inputs"] == 0
    assert compute["local_calls"] == 1 and compute["gpu_backing"] is None
    assert compute["gpu_inputs"] == {}
    # the dynamic evidence a verifier reads: declared, never exercised
    assert not r.trace["evidence"]["gpu"] and not r.trace["evidence"]["function"]
    lazy = modal_run("decorator_only.py::never_iterated")
    assert lazy.code == 0 and lazy.stdout == "done\n"
    assert not lazy.fn("compute")["ran_remotely"]


def test_a_failing_program_prints_its_traceback_and_exits_1(modal_run: Any) -> None:
    r = modal_run("failing.py::main")
    assert r.code == 1
    assert r.stdout == "before\n"
    assert "ZeroDivisionError: division by zero" in r.stderr
    assert "return a / b" in r.stderr  # the remote frame
    assert "print(divide.remote(1, 0))" in r.stderr  # the caller's frame
    assert "crucible/modalrt" not in r.stderr  # the runtime's own frames are left out
    assert r.trace["status"] == "failed"
    assert r.fn("divide")["failed_inputs"] == 1
    assert r.fn("divide")["errors"] == ["ZeroDivisionError: division by zero"]


def test_retries_timeouts_and_concurrent_inputs(modal_run: Any) -> None:
    r = modal_run("resilience.py")
    assert r.code == 0, r.stderr
    assert r.stdout.splitlines() == [
        "met [0, 1, 2]",  # three inputs at once in the one container allowed
        "taken [1, 2, 3]",
        "flaky ok after 2",
        "timeout FunctionTimeoutError",
        "crash True",
    ]
    assert r.fn("meet")["containers"] == 1
    assert r.fn("take")["containers"] == 2
    assert r.fn("flaky")["retries"] == 1 and r.fn("flaky")["failed_inputs"] == 0
    assert r.fn("slow")["failed_inputs"] == 1
    assert r.fn("crash")["errors"][0].startswith("RemoteError: the container")


def test_a_script_that_calls_app_run(modal_run: Any) -> None:
    r = modal_run("script.py", options=("--script",))
    assert r.code == 0, r.stderr
    assert r.stdout == "shifted 2\n"  # a class from __main__ travelled both ways
    assert r.trace["app_runs"] == 1 and r.fn("shift")["remote_inputs"] == 1


def test_a_function_as_the_entrypoint_and_usage_errors(modal_run: Any, tmp_path: Path) -> None:
    r = modal_run("fanout.py::add", "--a", "1", "--b", "2")
    assert r.code == 0, r.stderr
    assert r.fn("add")["inputs_by_call"] == {"remote": 1}
    bad = modal_run("fanout.py::nope")
    assert bad.code == 2 and "no entrypoint 'nope'" in bad.stderr
    assert bad.trace["status"] == "usage"
    typed = modal_run("fanout.py", "--n", "many")
    assert typed.code == 2 and "--n: expected int, got 'many'" in typed.stderr
    missing = modal_run("no_such_program.py")
    assert missing.code == 3


def test_modal_serve_until_sigterm(
    state: Path, tmp_path: Path, runtime_env: dict[str, str]
) -> None:
    pytest.importorskip("fastapi")
    import signal
    import subprocess
    import sys

    import httpx

    from tests.modalrt.conftest import PROGRAMS

    trace = tmp_path / "serve.json"
    argv = [sys.executable, "-m", "crucible.cli.main", "modal", "serve"]
    argv += ["--state-dir", str(state), "--trace", str(trace), str(PROGRAMS / "web.py")]
    proc = subprocess.Popen(argv, env=runtime_env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        urls = dict(proc.stdout.readline().strip().split(": ", 1) for _ in range(3))
        resp = httpx.post(urls["lookup"], json={"key": "ab"}, timeout=60)
        assert resp.json() == {"key": "ab", "value": 2}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    data = json.loads(trace.read_text())
    lookup = next(f for f in data["functions"] if f["name"] == "lookup")
    assert lookup["inputs_by_call"] == {"web": 1}


def test_results_that_do_not_travel_fail_their_input_only(modal_run: Any) -> None:
    r = modal_run("failing.py::serialization")
    assert r.code == 0, r.stderr
    assert r.stdout.splitlines() == [
        "local_class RemoteError",  # the container could not pickle it
        "container_only DeserializationError",  # the caller could not unpickle it
        "still working 2.0",  # and the containers went on serving
    ]
