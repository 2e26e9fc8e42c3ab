"""The sessions' HTTP routes (paths and models: records/serve.py, trainers/client.py).

`sessions_router(manager, dependencies)` is mounted by the service with its auth
dependency; every route answers a refusal with its status and a `detail` line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Response

from crucible.records.serve import (
    DownloadResponse,
    ExecRequest,
    ExecResponse,
    GradeResult,
    SessionCreate,
    SessionGradeRequest,
    SessionInfo,
    UploadRequest,
)
from crucible.records.submission import MAX_PATH_BYTES
from crucible.serve.session_ops import SessionRefused
from crucible.serve.sessions import SessionManager


def _refused(exc: SessionRefused) -> HTTPException:
    return HTTPException(status_code=exc.status, detail=exc.message)


def sessions_router(manager: SessionManager, dependencies: Sequence[Any] = ()) -> APIRouter:
    router = APIRouter(prefix="/v1/sessions", tags=["sessions"],
                       dependencies=[d if hasattr(d, "dependency") else Depends(d)
                                     for d in dependencies])  # fmt: skip

    @router.post("", response_model=SessionInfo)
    async def open_session(req: SessionCreate) -> SessionInfo:
        """Make the task's sandbox, run its setup and healthcheck: the session is open."""
        try:
            return await manager.open(req)
        except SessionRefused as exc:
            raise _refused(exc) from None

    @router.get("/{session_id}", response_model=SessionInfo)
    async def session_info(session_id: str) -> SessionInfo:
        try:
            return manager.info(session_id)
        except SessionRefused as exc:
            raise _refused(exc) from None

    @router.post("/{session_id}/exec", response_model=ExecResponse)
    async def exec_command(session_id: str, req: ExecRequest) -> ExecResponse:
        """Run a command as the task's agent user (cwd: the workdir unless given)."""
        try:
            return await manager.exec(session_id, req)
        except SessionRefused as exc:
            raise _refused(exc) from None

    @router.post("/{session_id}/upload", status_code=204)
    async def upload(session_id: str, req: UploadRequest) -> Response:
        try:
            await manager.upload(session_id, req)
        except SessionRefused as exc:
            raise _refused(exc) from None
        return Response(status_code=204)

    @router.get("/{session_id}/download", response_model=DownloadResponse)
    async def download(
        session_id: str, path: str = Query(min_length=1, max_length=MAX_PATH_BYTES)
    ) -> DownloadResponse:
        """A regular file's content (base64), read as the task's agent user."""
        try:
            return await manager.download(session_id, path)
        except SessionRefused as exc:
            raise _refused(exc) from None

    @router.post("/{session_id}/grade", response_model=GradeResult)
    async def grade(session_id: str, req: SessionGradeRequest | None = None) -> GradeResult:
        """Grade the sandbox as a trial is graded after its agent phase; the session ends."""
        try:
            return await manager.grade(session_id, req.id if req is not None else None)
        except SessionRefused as exc:
            raise _refused(exc) from None

    @router.delete("/{session_id}", status_code=204)
    async def close(session_id: str) -> Response:
        """End the session without grading it (a graded one: forget its answer)."""
        try:
            await manager.close(session_id)
        except SessionRefused as exc:
            raise _refused(exc) from None
        return Response(status_code=204)

    return router
