"""The client for OpenAI-compatible chat-completions endpoints.

Owns the wire: request shape, retries with exponential backoff (honouring
Retry-After) on 429, 5xx, transport errors and malformed replies, and the
classification of the rest. When retries run out it raises `ModelFailed`, so
the trial ends `model_failed` rather than graded. Two failures are not the
endpoint's fault and go back to the agent instead: `ContextOverflow` (the
prompt does not fit; trim and try again) and `ToolsUnsupported` (the server
refuses `tools`; switch to plain text). Any other 4xx but auth (401/403) and
a missing route or model (404) is `RequestRefused`: a ModelFailed to the agent,
while the judge, whose request is the submission, counts it against the attempt.

The API key is read from the environment variable the user names and only
ever goes into the Authorization header: it is never logged and never put
into a sandbox.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from crucible.errors import ModelFailed
from crucible.llm.errors import (
    CONTEXT_MARKERS,
    REFUSAL_MARKERS,
    ContentRefused,
    ContextOverflow,
    RequestRefused,
    ToolsUnsupported,
)
from crucible.llm.reply import (
    ChatClient,
    ChatReply,
    ToolCall,
    parse_reply,
    reasoning_of,
    token_fields,
)
from crucible.llm.reply import Retryable as _Retryable
from crucible.records.live import trial_budget
from crucible.records.text import storable
from crucible.records.usage import Usage

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"

_RETRY_STATUS = frozenset({408, 409, 429})


@dataclass
class ModelConfig:
    model: str
    base_url: str  # no default: see resolve_base_url
    api_key_env: str | None = DEFAULT_API_KEY_ENV  # None: no key is sent
    temperature: float | None = None
    max_output_tokens: int | None = None
    request_timeout_sec: float = 600.0
    max_retries: int = 6
    backoff_base_sec: float = 1.0
    backoff_max_sec: float = 60.0
    retry_after_max_sec: float = 300.0  # a day-long Retry-After is not waited out
    sampling: dict[str, Any] = field(default_factory=dict)  # top_p, seed, stop, ...: sent as given
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into the body last
    collect_tokens: bool = False  # ask for logprobs and token ids (vLLM, SGLang) and keep them

    @property
    def url(self) -> str:
        base = self.base_url.rstrip("/")
        return base if base.endswith("/chat/completions") else base + "/chat/completions"


class _UseMaxCompletionTokens(Exception):
    """OpenAI's reasoning models refuse `max_tokens` and want `max_completion_tokens`."""


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def _error_text(response: httpx.Response) -> str:
    text = response.text
    try:
        data = response.json()
    except ValueError:
        return text[:2000]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            parts = [str(err.get(k)) for k in ("code", "type", "message") if err.get(k)]
            if parts:
                return ": ".join(parts)[:2000]
        elif isinstance(err, str):
            return err[:2000]
    return text[:2000]


__all__ = ["ChatClient", "ChatReply", "ModelClient", "ModelConfig", "ToolCall"]


class ModelClient:
    """One endpoint and model; `chat()` is one completion with retries (a ChatClient)."""

    def __init__(self, config: ModelConfig, *, transport: httpx.AsyncBaseTransport | None = None):
        self.config = config
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(config.api_key_env) if config.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(config.request_timeout_sec, connect=30.0),
            transport=transport,
        )
        self._max_tokens_key = "max_tokens"  # the name most OpenAI-compatible servers know
        self.usage = Usage()
        self.n_calls = 0
        self.n_retries = 0

    async def __aenter__(self) -> ModelClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _body(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.config.model, "messages": messages}
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        if self.config.max_output_tokens is not None:
            body[self._max_tokens_key] = self.config.max_output_tokens
        body.update(self.config.sampling)
        if self.config.collect_tokens:
            body.setdefault("logprobs", True)
            body.setdefault("return_token_ids", True)  # vLLM >= 0.10.2; others ignore it
        body.update(self.config.extra_body)
        return body

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.config.backoff_base_sec * (2**attempt), self.config.backoff_max_sec)
        delay *= 0.5 + random.random() / 2  # jitter, so concurrent trials do not retry in step
        if retry_after is not None:
            # The server knows best, within reason.
            delay = max(delay, min(retry_after, self.config.retry_after_max_sec))
        return delay

    async def _attempt(self, body: dict[str, Any], with_tools: bool) -> ChatReply:
        started = datetime.now(UTC)
        t0 = time.monotonic()
        try:
            response = await self._http.post(self.config.url, json=body)
        except httpx.TransportError as exc:
            raise _Retryable(f"transport error: {type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if status == 429 or status in _RETRY_STATUS or status >= 500:
            raise _Retryable(
                f"HTTP {status}: {_error_text(response)[:300]}",
                parse_retry_after(response.headers.get("retry-after")),
            )
        if status >= 400:
            text = _error_text(response)
            lowered = text.lower()
            if status in (400, 413, 422) and any(m in lowered for m in CONTEXT_MARKERS):
                raise ContextOverflow(text)
            if any(m in lowered for m in REFUSAL_MARKERS):  # a filtering gateway's 403 too
                raise ContentRefused(
                    f"model endpoint refused the prompt: HTTP {status}: {text[:500]}",
                    status=status,
                )
            if status == 400 and "max_completion_tokens" in lowered and "max_tokens" in body:
                raise _UseMaxCompletionTokens(text)
            if with_tools and status in (400, 404, 422) and "tool" in lowered:
                raise ToolsUnsupported(text)
            hint = None
            if status in (401, 403):
                key_env = self.config.api_key_env
                hint = f"check the API key in ${key_env}" if key_env else "no API key was sent"
            elif status == 404:
                hint = f"check --model ({self.config.model}) and --model-base-url ({self.config.base_url})"
            message = f"model endpoint refused the request: HTTP {status}: {text[:500]}"
            if status in (401, 403, 404):  # the key, the URL or the model: the endpoint's
                raise ModelFailed(message, hint=hint)
            raise RequestRefused(message, status=status, hint=hint)
        try:
            data = storable(response.json())  # a "\udcff" escape is valid JSON
        except ValueError as exc:
            raise _Retryable(f"reply is not JSON: {response.text[:200]!r}") from exc
        if isinstance(data, dict) and data.get("error") and not data.get("choices"):
            said = str(data["error"])[:2000]  # a 200 carrying the 400 a proxy was given
            if "context_length_exceeded" in said:
                raise ContextOverflow(said)
            if any(m in said.lower() for m in REFUSAL_MARKERS):
                raise ContentRefused(f"model endpoint refused the prompt: {said[:500]}", status=200)
        content, calls, finish, usage = parse_reply(data)
        return ChatReply(
            reasoning_content=reasoning_of(data),
            tokens=token_fields(data, data["choices"][0]) if self.config.collect_tokens else {},
            content=content,
            tool_calls=calls,
            finish_reason=finish,
            usage=usage,
            latency_sec=time.monotonic() - t0,
            attempts=1,
            started_at=started,
        )

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> ChatReply:
        body = self._body(messages, tools)
        budget, n = trial_budget(self.config.max_retries + 1), 0  # the trial's tries share it
        while not budget.spent:
            try:
                reply = await self._attempt(body, with_tools=bool(tools))
            except _UseMaxCompletionTokens:
                self._max_tokens_key = "max_completion_tokens"
                body = self._body(messages, tools)
                continue
            except _Retryable as exc:
                n += 1
                if budget.failed(str(exc)):  # spent: no more attempts
                    break
                self.n_retries += 1
                await asyncio.sleep(self._backoff(budget.used - 1, exc.retry_after))
                continue
            reply.attempts = n + 1
            budget.succeeded()
            self.n_calls += 1
            self.usage = self.usage + reply.usage
            return reply
        raise ModelFailed(
            f"model endpoint failed after {budget.limit} attempts ({n} in this try): {budget.last}",
            hint=f"endpoint {self.config.url}, model {self.config.model}",
        )


BASE_URL_ENV = "OPENAI_BASE_URL"


def resolve_base_url(given: str | None) -> str:
    """The endpoint a run uses: --model-base-url, else $OPENAI_BASE_URL.

    Never a hosted default: a forgotten flag must not send a job's prompts (and
    its bill) to a service the user did not name. Raises ValueError when neither is set.
    """
    url = (given or os.environ.get(BASE_URL_ENV) or "").strip()
    if not url:
        raise ValueError(
            f"no model endpoint: pass --model-base-url URL (an OpenAI-compatible API, "
            f"e.g. http://127.0.0.1:8000/v1) or set ${BASE_URL_ENV}"
        )
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--model-base-url {url!r} is not an http(s) URL")
    return url


class EndpointUnreachable(Exception):
    """Preflight: nothing answered at the endpoint (connection refused, DNS, timeout)."""


class EndpointRefusedKey(Exception):
    """Preflight: the endpoint answered 401/403 (no key, or a wrong one)."""


async def check_endpoint(
    base_url: str, api_key_env: str, *, timeout_sec: float = 10.0, key_required: bool = False
) -> None:
    """One cheap request (GET {base}/models) before any sandbox starts.

    Raises EndpointUnreachable when nothing answers and EndpointRefusedKey on
    401/403 or when `key_required` and the variable is unset. Any other answer
    (200, or a server without /models) counts as reachable: the first real
    request reports what is wrong with it.
    """
    key = os.environ.get(api_key_env)
    if key_required and not key:
        raise EndpointRefusedKey(f"${api_key_env} is not set")
    base = base_url.rstrip("/")
    if base.endswith("/chat/completions"):
        base = base[: -len("/chat/completions")]
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with httpx.AsyncClient(timeout=timeout_sec) as http:
            response = await http.get(base + "/models", headers=headers)
    except httpx.HTTPError as exc:
        raise EndpointUnreachable(
            f"model endpoint {base_url} did not answer: {type(exc).__name__}: {exc}"
        ) from exc
    if response.status_code in (401, 403):
        unset = "" if key else f" (${api_key_env} is not set)"
        raise EndpointRefusedKey(
            f"model endpoint {base_url} refused the key: HTTP {response.status_code}{unset}: "
            f"{_error_text(response)[:200]}"
        )
