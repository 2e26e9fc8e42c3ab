"""The web translation task (examples/translation/polars-lookup-web) piece by piece, as the
io stage's web mode grades it: the solution's `lookup` endpoint served through the offline
Modal runtime (`crucible modal serve`, real HTTP on 127.0.0.1), the reference FastAPI app
called through httpx's ASGI transport, each case's requests sent to both and the
{"status", "json"} lists compared with the task's tolerances. Ports that answer one case
differently (a missing key as 200, the order of the keys lost) are told apart.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from crucible.modalrt.serve import serve_program
from crucible.verifiers.stages.io.compare import mismatch

TASK = Path(__file__).resolve().parents[2] / "examples" / "translation" / "polars-lookup-web"
CASES: list[dict[str, Any]] = json.loads((TASK / "tests" / "cases.json").read_text())
SOLUTION = (TASK / "solution" / "main.py").read_text()
IO = next(
    s
    for s in tomllib.loads((TASK / "task.toml").read_text())["metadata"]["crucible"]["stages"]
    if s["kind"] == "io"
)
Outputs = list[list[dict[str, Any]]]


def reference_outputs() -> Outputs:
    spec = importlib.util.spec_from_file_location("polars_lookup_reference", TASK / IO["reference"])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    asgi = getattr(module, IO["reference_app"])

    async def ask() -> Outputs:
        transport = httpx.ASGITransport(app=asgi)
        async with httpx.AsyncClient(transport=transport, base_url="http://reference") as c:
            return [[answer(await c.request(r["method"], r["path"], json=r.get("json")))
                     for r in case["requests"]] for case in CASES]  # fmt: skip

    return asyncio.run(ask())


def answer(resp: httpx.Response) -> dict[str, Any]:
    return {"status": resp.status_code, "json": resp.json()}


def served_outputs(program: Path, state: Path) -> tuple[Outputs, Any]:
    """Each case's answers from the program's endpoint, and the runtime's trace."""
    out: Outputs = []
    with serve_program(program, state_dir=state) as served:
        for case in CASES:
            base = served.urls[case["endpoint"]].rstrip("/")
            out.append([answer(httpx.request(r["method"], base + r["path"], json=r.get("json"),
                                             timeout=60))
                        for r in case["requests"]])  # fmt: skip
    return out, served.trace


def first_mismatch(expected: Outputs, got: Outputs) -> str | None:
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        why = mismatch(e, g, IO["abs_tol"], IO["rel_tol"], f"case {i}")
        if why:
            return why
    return None


@pytest.fixture(scope="module")
def expected() -> Outputs:
    return reference_outputs()


def test_the_cases_cover_hits_misses_and_batches(expected: Outputs) -> None:
    statuses = {a["status"] for case in expected for a in case}
    assert statuses == {200, 404}
    assert IO["mode"] == "web" and {c["endpoint"] for c in CASES} == {"lookup"}


def test_the_solution_served_offline_answers_as_the_reference(
    expected: Outputs, tmp_path: Path
) -> None:
    got, trace = served_outputs(TASK / "solution" / "main.py", tmp_path / "state")
    assert first_mismatch(expected, got) is None
    # every request was answered by the endpoint in a container, with the image declared
    (fn,) = trace.functions
    assert fn.name == "lookup" and fn.inputs_by_call == {"web": sum(len(c) for c in expected)}
    assert all(trace.evidence[c] for c in IO["require_evidence"])


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        # a missing key answered 200 instead of 404
        (
            'raise HTTPException(status_code=404, detail=f"unknown key: {key}")',
            'return {"key": key, "missing": True}',
            "case 1[0].status",
        ),
        # the products in key order, not in the order asked
        ('.sort("i").drop("i")', '.sort("key").drop("i")', "case 0[2].json.found[0].key"),
    ],
    ids=["missing-key-as-200", "order-asked-lost"],
)
def test_a_port_that_answers_differently_is_told_apart(
    expected: Outputs, tmp_path: Path, old: str, new: str, where: str
) -> None:
    assert SOLUTION.count(old) == 1
    program = tmp_path / "main.py"
    program.write_text(SOLUTION.replace(old, new))
    got, _ = served_outputs(program, tmp_path / "state")
    assert (first_mismatch(expected, got) or "").startswith(where)
