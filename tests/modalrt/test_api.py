"""The Python API (run_program), and the runtime's parts that need no program: argument
parsing, the needs-a-GPU rule, the image checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from crucible.modalrt.api import run_program, split_target
from crucible.modalrt.entry import UsageError, parse_args
from crucible.modalrt.gpu import needs_gpu
from crucible.modalrt.sdk.image import Image
from crucible.modalrt.serve import serve_program
from tests.helpers.wait import wait_until
from tests.modalrt.conftest import PROGRAMS
from tests.modalrt.stores import dict_value


def test_run_program_captures_output_and_returns_the_trace(
    state: Path, tmp_path: Path, runtime_env: dict[str, str]
) -> None:
    trace_file = tmp_path / "t.json"
    result = run_program(
        PROGRAMS / "async_entry.py",
        args=["--text", "hi there"],
        state_dir=state,
        trace_path=trace_file,
        capture=True,
        env=runtime_env,
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout is not None
    assert result.stdout.splitlines() == ["writing in the container", "wrote 8", "dict 1 ['k']"]
    assert (state / "volumes" / "notes" / "n.txt").read_text() == "hi there"
    write = result.trace.function("write")
    assert write is not None and write.inputs_by_call == {"remote": 1}
    assert result.status == "ok"
    assert trace_file.read_text().startswith("{")


def test_run_program_runs_a_function_entrypoint(state: Path, runtime_env: dict[str, str]) -> None:
    result = run_program(
        PROGRAMS / "fanout.py",
        "square",
        ["--x", "5"],
        state_dir=state,
        env=runtime_env,
        capture=True,
    )
    assert result.exit_code == 0, result.stderr
    square = result.trace.function("square")
    assert square is not None and square.remote_inputs == 1 and square.local_calls == 0


def test_run_program_refuses_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        run_program(tmp_path / "absent.py")


def test_split_target() -> None:
    assert split_target("a/prog.py::main") == (Path("a/prog.py"), "main")
    assert split_target("prog.py") == (Path("prog.py"), None)


def _entry(n: int, ratio: float, name: str = "x", verbose: bool = False) -> Any: ...


def test_arguments_follow_the_entrypoints_signature() -> None:
    assert parse_args(_entry, ["--n", "3", "--ratio=0.5", "--verbose"]) == {
        "n": 3,
        "ratio": 0.5,
        "verbose": True,
    }
    assert parse_args(_entry, ["--n", "1", "--ratio", "2", "--no-verbose", "--name", "y"]) == {
        "n": 1,
        "ratio": 2.0,
        "verbose": False,
        "name": "y",
    }
    for bad in (["--n", "1"], ["--n", "x", "--ratio", "1"], ["--other", "1"], ["pos"], ["--n"]):
        with pytest.raises(UsageError):
            parse_args(_entry, bad)


def _raise(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def _assert_cuda() -> None:
    import os

    assert os.path.exists("/dev/nvidia0") and torch_cuda_is_available()


def torch_cuda_is_available() -> bool:
    return False


def test_the_needs_a_gpu_rule() -> None:
    assert needs_gpu(_raise(RuntimeError("Found no NVIDIA driver on your system.")))
    assert needs_gpu(_raise(AssertionError("Torch not compiled with CUDA enabled")))
    assert needs_gpu(_raise(RuntimeError("CUDA error: no kernel image is available")))
    try:
        _assert_cuda()
    except AssertionError as exc:  # a bare assert: the failing line names cuda
        assert needs_gpu(exc)
    assert not needs_gpu(_raise(ValueError("shapes (2,3) and (2,3) not aligned")))
    assert not needs_gpu(_raise(AssertionError("expected 3 rows")))


def test_the_image_is_checked_against_this_machine(tmp_path: Path) -> None:
    img = (
        Image.debian_slim(python_version="3.11")
        .pip_install("pydantic", "surely-absent-package", ["httpx==0.0.1"])
        .apt_install("surely-absent-apt-package")
        .run_commands("echo hi")
        .env({"MODE": "fast"})
        .add_local_file(str(tmp_path / "missing.txt"), "/root/missing.txt")
    )
    warnings = img._warnings()
    assert not any("'pydantic'" in w for w in warnings)
    assert (
        "pip package 'surely-absent-package' requested by the image is not installed here"
        in warnings
    )
    assert any(w.startswith("pip package 'httpx': the image pins 0.0.1") for w in warnings)
    assert any("surely-absent-apt-package" in w for w in warnings)
    assert "run_commands step not run offline: 'echo hi'" in warnings
    assert any(w.startswith("add_local_file:") for w in warnings)
    assert img._env_vars() == {"MODE": "fast"}
    assert [op for op, _ in img._steps] == [
        "debian_slim",
        "pip_install",
        "apt_install",
        "run_commands",
        "env",
        "add_local_file",
    ]


def test_a_stopped_program_takes_its_containers_along(
    state: Path, runtime_env: dict[str, str]
) -> None:
    result = run_program(
        PROGRAMS / "hang.py", state_dir=state, env=runtime_env, capture=True, timeout=8
    )
    assert result.stdout is not None and "ready" in result.stdout  # the container was busy
    assert result.exit_code == 124 and result.status == "timeout"
    pid = dict_value(state, "hang", "pid")
    wait_until(lambda: not _alive(pid), f"container {pid} to die with its program")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose (its parent, not us, reaps it)
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1][0] != "Z"


def test_serve_program_answers_requests_until_the_block_ends(
    state: Path, runtime_env: dict[str, str]
) -> None:
    pytest.importorskip("fastapi")
    import httpx

    with serve_program(PROGRAMS / "web.py", state_dir=state, env=runtime_env) as served:
        assert set(served.urls) == {"lookup", "asgi", "wsgi"}
        resp = httpx.post(served.urls["lookup"], json={"key": "xyz"}, timeout=60)
        assert resp.json() == {"key": "xyz", "value": 3}
        assert httpx.get(served.urls["wsgi"] + "/?a=b", timeout=60).text == "wsgi a=b"
        bad = httpx.post(served.urls["lookup"], json={"nokey": 1}, timeout=60)
        assert bad.status_code == 500  # the endpoint raised KeyError; FastAPI answers 500
    assert served.exit_code == 0 and served.trace is not None
    lookup = served.trace.function("lookup")
    assert lookup is not None and lookup.inputs_by_call == {"web": 2}


def test_pyproject_and_dockerfile_images_are_recorded(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\ndependencies = ["pydantic"]\n'
        '[project.optional-dependencies]\ngpu = ["surely-absent-gpu-extra"]\n'
    )
    img = Image.from_dockerfile("Dockerfile").pip_install_from_pyproject(str(pyproject), ["gpu"])
    warnings = img._warnings()
    assert "from_dockerfile: 'Dockerfile' is not built offline" in warnings
    assert any("'surely-absent-gpu-extra'" in w for w in warnings)
    assert not any("'pydantic'" in w for w in warnings)


def test_generator_functions_through_remote_gen(state: Path, runtime_env: dict[str, str]) -> None:
    result = run_program(PROGRAMS / "generators.py", state_dir=state, env=runtime_env, capture=True)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "gen [0, 10, 20] [0, 10]\n"
    count = result.trace.function("count")
    assert count is not None and count.inputs_by_call == {"remote_gen": 2}
