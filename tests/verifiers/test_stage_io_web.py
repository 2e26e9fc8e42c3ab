"""The io stage's web mode on real sandboxes: the reference's ASGI app (a FastAPI app of
the task) and the submission's endpoint, served by the offline runtime inside its
sandbox and called over that sandbox's own loopback, get the same requests; statuses
and JSON bodies are compared. The trace reaches the judge through ctx.trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.verifiers.test_stages import make_task, submitted

from crucible.errors import TaskInvalid
from crucible.tasks.models import Task
from crucible.verifiers.pipeline import declared
from crucible.verifiers.stages.base import StageContext
from crucible.verifiers.stages.io import IoStage

# The same FastAPI routes: at the top level of the reference, inside the submission's
# @modal.asgi_app function.
ROUTES = """web = FastAPI()


@web.get("/")
def lookup(key: str) -> dict:
    if key not in TABLE:
        raise HTTPException(404, "no such key")
    return {"key": key, "value": TABLE[key]}


@web.post("/")
def add(item: dict) -> dict:
    return {"sum": sum(item["xs"])}
"""
REFERENCE = 'from fastapi import FastAPI, HTTPException\n\nTABLE = {"a": 1, "b": 2}\n' + ROUTES
SUBMISSION = (
    'import modal\n\napp = modal.App("lookup")\n'
    'image = modal.Image.debian_slim().pip_install("fastapi")\nTABLE = {"a": 1, "b": 2}\n\n\n'
    "@app.function(image=image)\n@modal.asgi_app()\ndef api():\n"
    "    from fastapi import FastAPI, HTTPException\n\n"
    + "".join(f"    {line}\n" if line else "\n" for line in ROUTES.splitlines())
    + "    return web\n"
)
CASES = [
    {"endpoint": "api", "requests": [{"method": "GET", "path": "/?key=a"},
                                     {"method": "GET", "path": "/?key=zz"}]},
    {"endpoint": "api", "requests": [{"method": "POST", "path": "/", "json": {"xs": [1, 2.5]}}],
     "inputs": {"api": 1}},
]  # fmt: skip


def web_task(root: Path, cases: list[dict] | None = None) -> Task:
    stage = ('[[metadata.crucible.stages]]\nkind = "io"\nmode = "web"\n'
             'reference = "tests/reference_app.py"\nreference_app = "web"\n'
             'cases_file = "tests/cases.json"\nrequire_evidence = ["web_endpoint"]\n')  # fmt: skip
    task = make_task(root, stage)
    (root / "tests" / "reference_app.py").write_text(REFERENCE)
    (root / "tests" / "cases.json").write_text(json.dumps(cases or CASES))
    return task


async def run_web(task: Task, tmp: Path, program: str) -> tuple[dict, StageContext]:
    (stage,) = declared(task)[1]
    assert isinstance(stage, IoStage)
    ctx = StageContext(task, submitted(tmp, program), {"reward": 1.0})
    res = await stage.run(ctx)
    return res.model_dump(mode="json"), ctx


async def test_web_endpoint_matches_the_reference_app(tmp_path: Path) -> None:
    res, ctx = await run_web(web_task(tmp_path / "t"), tmp_path, SUBMISSION)
    assert res["status"] == "passed", res["reason"]
    assert res["components"] == {"pass_rate": 1.0, "all_pass": 1.0}
    cases = res["details"]["cases"]
    assert cases[0]["endpoint"] == "api" and cases[0]["evidence"]["web_endpoint"]
    assert cases[0]["remote_inputs"] == {"api": 2}  # both requests reached a container
    # the judge gets the trace: the endpoint ran in a container for every request
    assert ctx.trace is not None and "api (function): 2 inputs in containers" in ctx.trace
    assert "by call: web 1" in ctx.trace  # case 1


async def test_a_wrong_response_fails_its_case(tmp_path: Path) -> None:
    wrong = SUBMISSION.replace('{"sum": sum(item["xs"])}', '{"sum": sum(item["xs"]) + 1}')
    res, _ = await run_web(web_task(tmp_path / "t"), tmp_path, wrong)
    assert res["components"] == {"pass_rate": 0.5, "all_pass": 0.0}, res["details"]
    assert "case 1: $[0].json.sum: expected 3.5, got 4.5" in res["reason"]


async def test_a_missing_endpoint_fails_and_a_web_case_needs_requests(tmp_path: Path) -> None:
    renamed = SUBMISSION.replace("def api():", "def other():")
    res, _ = await run_web(web_task(tmp_path / "t"), tmp_path, renamed)
    assert res["components"]["pass_rate"] == 0.0
    assert "no web endpoint 'api'" in res["reason"]
    bad = web_task(tmp_path / "b", [{"endpoint": "api", "requests": []}])
    with pytest.raises(TaskInvalid, match="needs an endpoint and requests"):
        await run_web(bad, tmp_path, SUBMISSION)
