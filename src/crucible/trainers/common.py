"""What every trainer adapter shares: which task a row names, the submission a completion
becomes, a stable idempotency id, and one client per process.

A row names its task the way `crucible dataset export` writes it: `task_id` and
`task_hash` at the top of a mapping, or under `metadata` / `crucible`, or as
`task: {id, hash}`. A mapping may arrive as a JSON string (trainers often stringify
labels). A bare string that is not JSON is the task's name.

A completion becomes a submission by a mode the user picks:
- `text` (default): the completion is the final answer (`{"type": "text"}`);
- `files`: the completion holds a JSON object `{"/abs/path": "content", ...}`;
- `patch`: the completion holds a unified diff (a fenced ```diff block is unwrapped).
A completion that does not parse as its mode is the policy's fault: status `invalid`,
reward 0, and the service is not asked (there is nothing to apply).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError

from crucible.records.serve import GradeItem, GradeResult, GradeStatus, TaskRef
from crucible.records.submission import (
    SUBMISSION,
    FilesSubmission,
    PatchSubmission,
    TextSubmission,
    submission_digest,
)
from crucible.trainers.client import AsyncServiceClient, ServiceClient, ServiceError, resolve

SubmissionMode = Literal["text", "files", "patch"]
AnySubmission = TextSubmission | FilesSubmission | PatchSubmission
ID_PREFIX = "crucible-"
_FENCE = re.compile(r"```(?:diff|patch)?[ \t]*\n(.*?)```", re.DOTALL)
_NESTS = ("crucible", "metadata", "meta")


def _as_mapping(value: Any) -> Mapping[str, Any] | None:
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            loaded = json.loads(value)
        except ValueError:
            return None
        return loaded if isinstance(loaded, Mapping) else None
    return None


def _ref_in(mapping: Mapping[str, Any], depth: int = 0) -> TaskRef | None:
    task = mapping.get("task")
    if isinstance(task, Mapping) and isinstance(task.get("id"), str):
        return TaskRef(id=task["id"], hash=task.get("hash"))
    if isinstance(mapping.get("task_id"), str):
        return TaskRef(id=mapping["task_id"], hash=mapping.get("task_hash"))
    if depth < 2:
        for key in _NESTS:
            inner = _as_mapping(mapping.get(key))
            if inner is not None and (ref := _ref_in(inner, depth + 1)) is not None:
                return ref
    return None


def find_task(*sources: Any) -> TaskRef:
    """The task the first source that names one names (mappings, JSON strings, then a
    bare non-JSON string as the task's name)."""
    for source in sources:
        mapping = _as_mapping(source)
        if mapping is not None and (ref := _ref_in(mapping)) is not None:
            return ref
    for source in sources:
        name = source.strip() if isinstance(source, str) else ""
        if name and not name.startswith(("{", "[")):  # broken JSON is no task's name
            return TaskRef(id=name)
    raise ValueError(
        "no crucible task named: give task_id (and task_hash) in the row's metadata, "
        "as `crucible dataset export` writes them, or the task's name as the label"
    )


def to_submission(completion: str, mode: SubmissionMode = "text") -> AnySubmission:
    """The completion as a submission of `mode`; ValueError when it does not parse."""
    if mode == "text":
        return TextSubmission(text=completion)
    if mode == "patch":
        fenced = _FENCE.search(completion)
        patch = fenced.group(1) if fenced else completion
        if not patch.strip():
            raise ValueError("the completion holds no patch")
        return PatchSubmission(patch=patch)
    if mode == "files":
        fenced = re.search(r"```(?:json)?[ \t]*\n(.*?)```", completion, re.DOTALL)
        try:
            files = json.loads(fenced.group(1) if fenced else completion, strict=False)
        except ValueError as exc:
            raise ValueError(f"the completion is not a JSON object of files: {exc}") from exc
        try:
            return SUBMISSION.validate_python({"type": "files", "files": files})
        except ValidationError as exc:
            raise ValueError(f"not a files submission: {exc.errors()[0]['msg']}") from exc
    raise ValueError(f"unknown submission mode {mode!r} (text, files or patch)")


def grade_id(task: TaskRef, submission: AnySubmission, salt: str = "") -> str:
    """A stable idempotency key: the same task, submission and salt give the same id,
    so a trainer's retries never start a second sandbox."""
    key = json.dumps([task.id, task.hash, submission_digest(submission), salt])
    return ID_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:40]


def invalid_result(item_id: str, reason: str) -> GradeResult:
    """The policy's malformed output, judged here: reward 0, nothing sent."""
    return GradeResult(id=item_id, status=GradeStatus.invalid, reward=0.0, error=reason[:500])


def unscorable_result(item_id: str, reason: str) -> GradeResult:
    """The service could not be reached after the client's retries: infrastructure."""
    return GradeResult(id=item_id, status=GradeStatus.unscorable, error=reason[:500])


def prepare(task: TaskRef, completion: str, mode: SubmissionMode,
            salt: str = "", meta: Mapping[str, Any] | None = None,
            group_id: str | None = None) -> GradeItem | GradeResult:  # fmt: skip
    """A grade item for the service, or the `invalid` result when the completion does
    not parse as its mode (its id hashes the raw completion)."""
    try:
        sub = to_submission(completion, mode)
    except ValueError as exc:
        raw = TextSubmission(text=completion[:1_000_000])
        return invalid_result(grade_id(task, raw, f"{mode}:{salt}"), str(exc))
    return GradeItem(id=grade_id(task, sub, salt), task=task, submission=sub,
                     group_id=group_id, meta=dict(meta or {}))  # fmt: skip


def merge(prepared: list[GradeItem | GradeResult], graded: list[GradeResult]) -> list[GradeResult]:
    """Results in input order: the local ones where prepared, the service's elsewhere."""
    it = iter(graded)
    return [p if isinstance(p, GradeResult) else next(it) for p in prepared]


def transport_failed(exc: ServiceError) -> bool:
    """A 5xx or no answer after the client's retries (infrastructure); a 4xx is the
    caller's mistake (unknown task, hash mismatch) and is raised."""
    return exc.status is None or exc.status >= 500


def grade_sync(client: ServiceClient, prepared: list[GradeItem | GradeResult],
               wait_s: float) -> list[GradeResult]:  # fmt: skip
    items = [p for p in prepared if isinstance(p, GradeItem)]
    if not items:
        return merge(prepared, [])
    try:
        graded = client.grade(items, wait_s=wait_s)
    except ServiceError as exc:
        if not transport_failed(exc):
            raise
        graded = [unscorable_result(i.id, str(exc)) for i in items]
    return merge(prepared, graded)


async def grade_async(client: AsyncServiceClient, prepared: list[GradeItem | GradeResult],
                      wait_s: float) -> list[GradeResult]:  # fmt: skip
    items = [p for p in prepared if isinstance(p, GradeItem)]
    if not items:
        return merge(prepared, [])
    try:
        graded = await client.grade(items, wait_s=wait_s)
    except ServiceError as exc:
        if not transport_failed(exc):
            raise
        graded = [unscorable_result(i.id, str(exc)) for i in items]
    return merge(prepared, graded)


# -- one client per process (per event loop for the async one) -------------------------
_lock = threading.Lock()
_sync: dict[tuple[str, str], ServiceClient] = {}
_async: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, str], AsyncServiceClient]
] = weakref.WeakKeyDictionary()


def sync_client(url: str | None = None, token: str | None = None) -> ServiceClient:
    """The process's blocking client for (url, token); URL and token default to the
    CRUCIBLE_SERVE_* variables. httpx.Client is safe to share between threads."""
    key = resolve(url, token)  # the endpoint the variables name now
    with _lock:
        client = _sync.get(key)
        if client is None:
            client = _sync[key] = ServiceClient(*key)
        return client


def async_client(url: str | None = None, token: str | None = None) -> AsyncServiceClient:
    """The running event loop's client for (url, token) (an httpx.AsyncClient belongs
    to the loop it first ran on)."""
    loop, key = asyncio.get_running_loop(), resolve(url, token)
    with _lock:
        clients = _async.setdefault(loop, {})
        client = clients.get(key)
        if client is None:
            client = clients[key] = AsyncServiceClient(*key)
        return client
