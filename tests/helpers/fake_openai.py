"""A real HTTP server on 127.0.0.1 that speaks OpenAI chat completions from a script.

Each POST to /v1/chat/completions consumes the next scripted step: a reply
(text and/or tool calls, with usage), an HTTP error (429 with Retry-After,
500, ...), a malformed body, or a callable that builds a step from the
request. Two behaviours apply before the script: `reject_tools` answers any
request carrying `tools` with a 400, and `context_limit_chars` answers a
request whose messages exceed that size with a context-length 400. An
exhausted script answers 500 and sets `exhausted`, so a test that expected
fewer calls fails loudly. The usage the server reported is summed in
`reported_usage`, for tests that compare it with what crucible recorded.

A check that fails inside the server's thread (a callable step asserting on
the request, or a bug here) is recorded, not lost as a dropped connection:
that request and every later one get a 418 naming it (not retried by the
client, so the test ends at once with the message in its ModelFailed), and
`check()` re-raises it in the test; the fixture and `with` call it on the
way out.
"""

from __future__ import annotations

import json
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Step:
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments", "id"?}
    usage: dict[str, Any] | None = None  # None: computed from the request's size
    cached_tokens: int = 0
    status: int = 200
    raw_body: str | None = None  # sent verbatim (malformed replies)
    headers: dict[str, str] = field(default_factory=dict)
    error: dict[str, Any] | None = None  # body {"error": ...} for a non-200
    finish_reason: str | None = None  # None: "tool_calls" with calls, else "stop"
    message_extra: dict[str, Any] = field(default_factory=dict)  # e.g. reasoning_content
    choice_extra: dict[str, Any] = field(default_factory=dict)  # e.g. logprobs, token_ids
    reply_extra: dict[str, Any] = field(default_factory=dict)  # e.g. prompt_token_ids


StepSource = Step | Callable[[dict[str, Any]], "Step"]


def text(content: str, **kw: Any) -> Step:
    return Step(content=content, **kw)


def tool(
    name: str, arguments: dict[str, Any] | str | None = None, content: str | None = None, **kw: Any
) -> Step:
    return Step(content=content, tool_calls=[{"name": name, "arguments": arguments or {}}], **kw)


def bash(command: str, **kw: Any) -> Step:
    return tool("bash", {"command": command}, **kw)


def submit(**kw: Any) -> Step:
    return tool("submit", {}, **kw)


def http_error(
    status: int, message: str = "error", *, retry_after: str | None = None, code: str | None = None
) -> Step:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Step(
        status=status,
        headers=headers,
        error={"message": message, "type": "server_error", "code": code},
    )


def malformed(body: str = '{"choices": [') -> Step:
    return Step(raw_body=body)


def context_overflow() -> Step:
    return Step(
        status=400,
        error={
            "message": "This model's maximum context length is 1000 tokens. However, you requested 5000 tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        },
    )


def _messages_chars(body: dict[str, Any]) -> int:
    return len(json.dumps(body.get("messages", [])))


class FakeOpenAI:
    def __init__(
        self,
        script: list[StepSource] | None = None,
        *,
        reject_tools: bool = False,
        context_limit_chars: int | None = None,
        fail_always: int | None = None,
        api_key: str | None = None,
    ) -> None:
        self.script: list[StepSource] = list(script or [])
        self.reject_tools = reject_tools
        self.context_limit_chars = context_limit_chars
        self.fail_always = fail_always
        self.api_key = api_key  # GET /models answers 401 without it (chat is not checked)
        self.model_list_requests = 0
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self.responses: list[str] = []  # the bodies of the 200 replies, as sent
        self.reported_usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
        self.n_ok = 0
        self.exhausted = False
        self.failures: list[str] = []  # checks that failed in the server's thread
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- script -----------------------------------------------------------
    def push(self, *steps: StepSource) -> None:
        with self._lock:
            self.script.extend(steps)

    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    # -- lifecycle --------------------------------------------------------
    def start(self) -> FakeOpenAI:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                # GET {base}/models: what a preflight asks; 401 when a key is required
                # and the request does not carry it.
                if not self.path.rstrip("/").endswith("/models"):
                    status, payload = 404, {"error": {"message": f"no route {self.path}"}}
                elif (
                    owner.api_key and self.headers.get("Authorization") != f"Bearer {owner.api_key}"
                ):
                    status, payload = 401, {"error": {"message": "invalid api key"}}
                else:
                    status, payload = 200, {"object": "list", "data": [{"id": "fake"}]}
                owner.model_list_requests += 1
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    raw = self.rfile.read(length)
                    status, headers, payload = owner._handle(self.path, dict(self.headers), raw)
                except Exception as exc:  # recorded for the test, answered for the client
                    status, headers, payload = owner._failed(exc)
                data = payload.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.check()

    # -- failures in the server's thread ------------------------------------
    def check(self) -> None:
        """Raise the first check that failed in the server's thread, with its message."""
        if self.failures:
            more = f" (and {len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
            raise AssertionError(f"fake OpenAI server: {self.failures[0]}{more}")

    def _failed(self, exc: BaseException) -> tuple[int, dict[str, str], str]:
        where = "".join(traceback.format_exception(exc)[-3:]).strip()
        with self._lock:
            self.failures.append(f"request {len(self.requests)}: {where}")
        return self._refused()

    def _refused(self) -> tuple[int, dict[str, str], str]:
        # 418: an error the client neither retries nor reads as a missing feature
        return 418, {}, json.dumps({"error": {"message": f"fake server: {self.failures[0]}"}})

    # -- serving ----------------------------------------------------------
    def _handle(
        self, path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, dict[str, str], str]:
        if not path.rstrip("/").endswith("/chat/completions"):
            return 404, {}, json.dumps({"error": {"message": f"no route {path}"}})
        try:
            body = json.loads(raw)
        except ValueError:
            return 400, {}, json.dumps({"error": {"message": "request body is not JSON"}})
        with self._lock:
            self.requests.append(body)
            self.request_headers.append(headers)
            if self.failures:  # the test already failed: end it now
                return self._refused()
            if self.fail_always is not None:
                return self.fail_always, {}, json.dumps({"error": {"message": "always failing"}})
            if self.reject_tools and body.get("tools"):
                return (
                    400,
                    {},
                    json.dumps(
                        {
                            "error": {
                                "message": '"auto" tool choice requires --enable-auto-tool-choice and '
                                "--tool-call-parser to be set",
                                "type": "BadRequestError",
                            }
                        }
                    ),
                )
            if (
                self.context_limit_chars is not None
                and _messages_chars(body) > self.context_limit_chars
            ):
                return 400, {}, json.dumps({"error": context_overflow().error})
            if not self.script:
                self.exhausted = True
                return 500, {}, json.dumps({"error": {"message": "fake server: script exhausted"}})
            source = self.script.pop(0)
        try:
            step = source(body) if callable(source) else source
            return self._render(step, body)
        except Exception as exc:
            return self._failed(exc)

    def _render(self, step: Step, body: dict[str, Any]) -> tuple[int, dict[str, str], str]:
        if step.raw_body is not None:
            return step.status, step.headers, step.raw_body
        if step.status != 200:
            return (
                step.status,
                step.headers,
                json.dumps({"error": step.error or {"message": "error"}}),
            )
        calls: list[dict[str, Any]] = []
        for i, call in enumerate(step.tool_calls):
            args = call.get("arguments", {})
            calls.append(
                {
                    "id": call.get("id") or f"call_{len(self.requests)}_{i}",
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": args if isinstance(args, str) else json.dumps(args),
                    },
                }
            )
        message: dict[str, Any] = {"role": "assistant", "content": step.content}
        if calls:
            message["tool_calls"] = calls
        message.update(step.message_extra)
        if step.usage is not None:
            usage = dict(step.usage)
        else:
            out_chars = len(step.content or "") + sum(
                len(c["function"]["arguments"]) for c in calls
            )
            usage = {
                "prompt_tokens": _messages_chars(body) // 4 + 7,
                "completion_tokens": out_chars // 4 + 3,
            }
            if step.cached_tokens:
                usage["prompt_tokens_details"] = {"cached_tokens": step.cached_tokens}
        usage["total_tokens"] = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
        with self._lock:
            self.n_ok += 1
            self.reported_usage["prompt_tokens"] += usage.get("prompt_tokens", 0)
            self.reported_usage["completion_tokens"] += usage.get("completion_tokens", 0)
            self.reported_usage["cached_tokens"] += (usage.get("prompt_tokens_details") or {}).get(
                "cached_tokens", 0
            )
        reply = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": step.finish_reason or ("tool_calls" if calls else "stop"),
                    **step.choice_extra,
                }
            ],
            "usage": usage,
            **step.reply_extra,
        }
        sent = json.dumps(reply)
        with self._lock:
            self.responses.append(sent)
        return 200, step.headers, sent


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started scripted server; push steps with `fake_openai.push(...)`."""
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()
    server.check()  # at teardown: a model_failed in the test may be this failure's echo


@pytest.fixture
def judge(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """A started scripted server as the operator's judge ($CRUCIBLE_JUDGE_BASE_URL, with
    a key in $CRUCIBLE_JUDGE_API_KEY)."""
    with FakeOpenAI() as server:
        monkeypatch.setenv("CRUCIBLE_JUDGE_BASE_URL", server.url)
        monkeypatch.setenv("CRUCIBLE_JUDGE_API_KEY", "judge-secret")
        yield server
