"""The error taxonomy: every way a trial can end without a reward, as data.

Layers raise these typed exceptions; the engine turns them into the
`outcome` of a trial. Infrastructure failures are never a zero reward.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class ErrorKind(StrEnum):
    task_invalid = "task_invalid"
    sandbox_failed = "sandbox_failed"
    resources_unavailable = "resources_unavailable"
    model_failed = "model_failed"
    verifier_failed = "verifier_failed"
    cancelled = "cancelled"


# Kinds the scheduler retries by default (with backoff, slot released while waiting).
RETRYABLE: frozenset[ErrorKind] = frozenset({ErrorKind.sandbox_failed, ErrorKind.model_failed})


class CrucibleError(Exception):
    """Base of every error crucible attributes to a layer."""

    kind: ErrorKind = ErrorKind.sandbox_failed

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class TaskInvalid(CrucibleError):
    kind = ErrorKind.task_invalid


class SandboxFailed(CrucibleError):
    """The provider failed: start, exec transport, a lost sandbox."""

    kind = ErrorKind.sandbox_failed


class ResourcesUnavailable(CrucibleError):
    """The task asks for something this provider cannot give (a GPU, say)."""

    kind = ErrorKind.resources_unavailable


class ModelFailed(CrucibleError):
    """The model endpoint failed after retries (transport, 429/5xx, malformed replies)."""

    kind = ErrorKind.model_failed


class VerifierFailed(CrucibleError):
    """No reward, an unreadable reward, or a verifier timeout."""

    kind = ErrorKind.verifier_failed


class Tampered(VerifierFailed):
    """Under `--tampered zero`: the attempt changed code of the image that grading can run
    (records/tamper.py); counted 0 like any failure of the attempt's own grading."""


class Cancelled(CrucibleError):
    kind = ErrorKind.cancelled


class ProviderUnavailable(CrucibleError):
    """A provider's preflight failed: no engine answers, no binary, no credentials."""

    kind = ErrorKind.sandbox_failed


class AuthError(ProviderUnavailable):
    """Credentials are missing or refused (exit code 4)."""


class ExitCode:
    """Stable exit codes shared by every command."""

    OK = 0
    ERROR = 1
    USAGE = 2
    NOT_FOUND = 3
    AUTH = 4
    BACKEND = 5
    NEEDS_GPU = 6  # `crucible modal run`: a GPU function needed CUDA and this machine has none


class UnknownKey(ValueError):
    """A key no one reads (a config file's, an `--env-param`'s): a typo would otherwise be
    silently ignored. The message names the closest known key; the CLI exits 2 (usage)."""

    def __init__(self, what: str, key: str, known: Iterable[str]) -> None:
        from difflib import get_close_matches

        self.key = key
        self.known = sorted(set(known))
        close = get_close_matches(key, self.known, n=1)
        self.suggestion = close[0] if close else None
        known_text = "known: " + ", ".join(self.known)
        hint = f"did you mean {self.suggestion!r}? ({known_text})" if close else known_text
        super().__init__(f"unknown {what} {key!r}: {hint}")
