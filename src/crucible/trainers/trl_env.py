"""TRL's `environment_factory` over the grading service's sessions: each rollout acts in its
own task sandbox (`POST /v1/sessions`), and its reward is that sandbox graded as a trial's
is after its agent phase.

    from crucible.trainers.trl_env import crucible_environment
    trainer = GRPOTrainer(model=..., environment_factory=crucible_environment(url, token),
                          train_dataset=prompts)   # rows from `crucible dataset export`

What TRL 1.16 asks of an environment (trl/trainer/grpo_trainer.py, `__init__` and
`_generate_and_score_completions`; it needs transformers >= 5.2 and a chat template that
renders tool calls):
- the factory is called with no argument: once at start (a probe whose public methods
  become the tools, so making one opens nothing), then as often as a batch needs
  instances, which are pooled and reused;
- `reset(**row)` is called before each rollout with the dataset row's columns (here
  `task_id` and `task_hash`) and may return text appended to the last user message;
- every other public method is a tool the model may call (its name, type hints and
  Google-style docstring make the tool's schema); what it returns is the tool message, and
  an exception becomes `{"error": ...}`;
- `get_reward()` is called once per finished rollout; None is masked.

Here `reset` closes the instance's previous session and opens one for the row's task; the
tools run commands and read and write files as the task's agent user; `get_reward` grades
the session once (a stable grade id, so a retry returns the same grade), closes it, and
maps the status as the reward function does (trl.py `reward_of`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from crucible.records.prompt_row import TASK_HASH, TASK_ID
from crucible.records.serve import GradeResult
from crucible.trainers.client import ServiceClient, ServiceError
from crucible.trainers.common import sync_client, transport_failed, unscorable_result
from crucible.trainers.trl import reward_of

DEFAULT_MAX_OUTPUT_CHARS = 4000


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"


class CrucibleEnvironment:
    """One rollout's sandbox: a session of the service at `url` (else $CRUCIBLE_SERVE_URL)."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 exec_timeout_s: float = 60.0, max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
                 idle_timeout_s: float | None = None) -> None:  # fmt: skip
        self._url, self._token = url, token
        self._exec_timeout_s = exec_timeout_s
        self._max_output_chars = max_output_chars
        self._idle_timeout_s = idle_timeout_s
        self._session: str | None = None
        self.open_error: str | None = None  # why reset() found no sandbox (infrastructure)
        self.last_result: GradeResult | None = None  # the last grade, for logs and tests

    def _client(self) -> ServiceClient:
        return sync_client(self._url, self._token)

    def _open(self) -> str:
        if self._session is None:
            why = f": {self.open_error}" if self.open_error else ": reset() opens one"
            raise RuntimeError("no sandbox for this rollout" + why)
        return self._session

    def _close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            try:
                self._client().close_session(session)
            except ServiceError as exc:
                if exc.status != 404:  # already gone (graded, or timed out idle)
                    raise

    def reset(self, **row: Any) -> str | None:
        """Close the last rollout's session, and open one for the row's task. When the
        service cannot make one (it failed or did not answer), the rollout goes on without
        a sandbox: its tools say why and its reward is masked."""
        self._close()
        task_id = row.get(TASK_ID)
        if not isinstance(task_id, str) or not task_id:
            raise ValueError("the dataset row has no task_id: make the prompt set with "
                             "`crucible dataset export`")  # fmt: skip
        self.last_result, self.open_error = None, None
        try:
            info = self._client().open_session(task_id, task_hash=row.get(TASK_HASH),
                                               idle_timeout_s=self._idle_timeout_s)  # fmt: skip
        except ServiceError as exc:
            if not transport_failed(exc):
                raise  # an unknown or changed task: the run is misconfigured
            self.open_error = str(exc)  # no sandbox: the tools say so, the reward is masked
            return None
        self._session = info.id
        return None

    def run_command(self, command: str) -> str:
        """Run a shell command in the task's sandbox, in its working directory.

        Args:
            command: The shell command to run.

        Returns:
            The command's exit code, then its standard output and standard error.
        """
        res = self._client().exec(self._open(), command, timeout_s=self._exec_timeout_s)
        head = f"exit code {res.exit_code}" + (" (timed out)" if res.timed_out else "")
        body = res.stdout + (f"\n[stderr]\n{res.stderr}" if res.stderr else "")
        return head + "\n" + _cut(body, self._max_output_chars)

    def read_file(self, path: str) -> str:
        """Read a text file in the task's sandbox.

        Args:
            path: The file's path, absolute or relative to the working directory.

        Returns:
            The file's content.
        """
        data = self._client().download(self._open(), path)
        return _cut(data.decode("utf-8", errors="replace"), self._max_output_chars)

    def write_file(self, path: str, content: str) -> str:
        """Write a text file in the task's sandbox, replacing it if it exists.

        Args:
            path: The file's path, absolute or relative to the working directory.
            content: The file's whole new content.

        Returns:
            What was written.
        """
        self._client().upload(self._open(), path, content)
        return f"wrote {len(content.encode())} bytes to {path}"

    def get_reward(self) -> float | None:
        """Grade the sandbox as a trial's is graded, close the session; None masks it (no
        sandbox, or the service failed: `unscorable`)."""
        session = self._session
        if session is None:
            return None
        grade_id = "trl-session-" + hashlib.sha256(session.encode()).hexdigest()[:40]
        try:
            self.last_result = self._client().grade_session(session, grade_id=grade_id)
        except ServiceError as exc:
            if not transport_failed(exc):
                raise
            self.last_result = unscorable_result(grade_id, str(exc))
        finally:
            self._close()
        return reward_of(self.last_result)


def crucible_environment(url: str | None = None, token: str | None = None, *,
                         exec_timeout_s: float = 60.0,
                         max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
                         idle_timeout_s: float | None = None) -> Callable[[], CrucibleEnvironment]:  # fmt: skip
    """An `environment_factory` for TRL's GRPOTrainer: each call makes an environment whose
    rollouts run in sessions of the service at `url` (else $CRUCIBLE_SERVE_URL) with
    `token` (else $CRUCIBLE_SERVE_TOKEN / $CRUCIBLE_SERVE_TOKEN_FILE)."""

    def factory() -> CrucibleEnvironment:
        return CrucibleEnvironment(url, token, exec_timeout_s=exec_timeout_s,
                                   max_output_chars=max_output_chars,
                                   idle_timeout_s=idle_timeout_s)  # fmt: skip

    return factory
