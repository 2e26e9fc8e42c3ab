"""The service's HTTP face (FastAPI): POST /v1/grade, GET /v1/grade/{id}, /health,
/metrics, and OpenAPI docs at /docs. Other parts add routers (sessions) through
`create_app(..., routers=[...])`; every route but /health (and the docs) sits behind
the bearer token."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import APIRouter, Body, Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ValidationError

from crucible import __version__
from crucible.records.serve import MAX_WAIT_S, GradeRequest, GradeResponse, GradeResult
from crucible.serve.auth import bearer_auth
from crucible.serve.common import Refused
from crucible.serve.limits import DEFAULT_MAX_BODY_MB, BodyLimit
from crucible.serve.service import GradeService
from crucible.serve.wire import read_grade_request


def create_app(
    service: GradeService,
    token: str,
    *,
    routers: Iterable[APIRouter] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_MB * 1024 * 1024,
    extra_metrics: Iterable[Callable[[], str]] = (),
) -> FastAPI:
    auth = bearer_auth(token)
    app = FastAPI(
        title="crucible serve",
        version=__version__,
        description="Grades submissions to crucible tasks in sandboxes (docs/serve.md).",
        default_response_class=AsciiJSONResponse,
    )
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.state.service = service
    app.state.auth = auth
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    guarded = [Depends(auth)]
    metrics_parts = list(extra_metrics)

    @app.get("/health")
    async def health() -> JSONResponse:
        """Readiness, without the token (a probe has none): it says nothing but whether
        the service is up, and the token guards everything that does something."""
        if not service.ready:
            return JSONResponse({"status": "starting"}, status_code=503)
        return JSONResponse({"status": "ok", "version": __version__})

    @app.get("/metrics", dependencies=guarded, response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        text = service.metrics.render() + "".join(part() for part in metrics_parts)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    @app.post("/v1/grade", dependencies=guarded, response_model=GradeResponse,
              openapi_extra=_request_body(GradeRequest))  # fmt: skip
    async def grade(body: Any = Body(...)) -> Response:
        """Grade every item; results in input order. An item's id is its idempotency key;
        an item whose submission is malformed is answered `invalid` (reward 0)."""
        try:
            req, malformed = read_grade_request(body)
        except ValidationError as exc:
            service.metrics.requests["422"] += 1
            raise RequestValidationError(exc.errors(include_url=False)) from None
        try:
            ids = service.submit(req.items, malformed)
        except Refused as exc:
            service.metrics.requests[str(exc.status)] += 1
            raise HTTPException(exc.status, exc.message) from None
        results = await service.wait(ids, req.wait_s)
        service.metrics.requests["200"] += 1
        return model_response(GradeResponse(results=results))

    @app.get("/v1/grade/{grade_id:path}", dependencies=guarded, response_model=GradeResult)
    async def get_grade(
        grade_id: str, wait_s: float = Query(0.0, ge=0.0, le=MAX_WAIT_S)
    ) -> Response:
        """A grade by id: its result, or `pending` if not done within `wait_s`."""
        got = await service.get(grade_id, wait_s)
        if got is None:
            raise HTTPException(404, f"no grade with id {grade_id!r}")
        return model_response(got)

    for router in routers:
        app.include_router(router, dependencies=guarded)
    _document(app, GradeRequest)
    return app


class AsciiJSONResponse(JSONResponse):
    """JSON with everything past ASCII escaped: text UTF-8 cannot hold (a lone surrogate
    a client sent, echoed in an error) is still a valid answer, never a crash."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode()


def model_response(model: BaseModel, status_code: int = 200) -> Response:
    """`model` as the JSON answer, rendered once: a route's `response_model` stays for the
    OpenAPI docs, but FastAPI does not validate again what the service built, typed, and
    encode it a second time (returning a Response skips both)."""
    return AsciiJSONResponse(model.model_dump(mode="json"), status_code=status_code)


async def _invalid_request(request: Request, exc: Exception) -> Response:
    """422 with where and why (FastAPI's shape), without echoing the input back."""
    assert isinstance(exc, RequestValidationError)
    errors = [{k: v for k, v in e.items() if k in ("type", "loc", "msg")} for e in exc.errors()]
    return AsciiJSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)


def _request_body(model: type[BaseModel]) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _document(app: FastAPI, model: type[BaseModel]) -> None:
    """Put `model` (read by hand, not by FastAPI) in the OpenAPI components /docs shows."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = base()
            defs = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, sub in defs.pop("$defs", {}).items():
                components.setdefault(name, sub)
            components[model.__name__] = defs
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
