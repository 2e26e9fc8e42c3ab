"""A submission: the agent's work handed in from outside (a trainer's rollout), as data.

What the grading service (serve/) takes in place of an agent run. Three shapes:
- `text`: the final answer, written to the path the task declares in
  `[metadata] answer_path` (default `/logs/agent/answer.txt`);
- `files`: absolute sandbox paths and their contents;
- `patch`: a unified diff applied to the task's workdir.

Shapes are checked here, before any sandbox exists (a malformed submission is the
policy's fault: status `invalid`, reward 0); whether it *applies* is found in the
sandbox by agents/submission.py. `submission_digest` is the idempotency key's
companion: the same grade id with another digest is a conflict.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

# Caps on what one submission may hold (the service caps the request body too).
MAX_FILES = 1000
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
MAX_SUBMISSION_BYTES = 16 * 1024 * 1024

DEFAULT_ANSWER_PATH = "/logs/agent/answer.txt"


def check_sandbox_path(path: str) -> str:
    """An absolute, normalized sandbox path with no NUL, `..` or over-long parts."""
    if not path.startswith("/"):
        raise ValueError(f"path {path[:80]!r} is not absolute")
    if "\x00" in path:
        raise ValueError("a path holds a NUL byte")
    if len(path.encode()) > MAX_PATH_BYTES:
        raise ValueError(f"a path is over {MAX_PATH_BYTES} bytes")
    parts = path.split("/")
    if ".." in parts:
        raise ValueError(f"path {path[:80]!r} holds '..'")
    if any(len(p.encode()) > MAX_NAME_BYTES for p in parts):
        raise ValueError(f"a name in {path[:80]!r}... is over {MAX_NAME_BYTES} bytes")
    norm = posixpath.normpath(path)
    if norm == "/":
        raise ValueError("a file's path cannot be /")
    return norm


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextSubmission(_Shape):
    type: Literal["text"] = "text"
    text: str = Field(max_length=MAX_SUBMISSION_BYTES)


class FilesSubmission(_Shape):
    type: Literal["files"] = "files"
    files: dict[str, str]

    @field_validator("files")
    @classmethod
    def _paths(cls, files: dict[str, str]) -> dict[str, str]:
        if not files:
            raise ValueError("a files submission needs at least one file")
        if len(files) > MAX_FILES:
            raise ValueError(f"over {MAX_FILES} files")
        out: dict[str, str] = {}
        for path, content in files.items():
            norm = check_sandbox_path(path)
            if norm in out:
                raise ValueError(f"{norm!r} is given twice")
            out[norm] = content
        if sum(len(c.encode()) for c in out.values()) > MAX_SUBMISSION_BYTES:
            raise ValueError(f"the files hold over {MAX_SUBMISSION_BYTES} bytes")
        return out


class PatchSubmission(_Shape):
    type: Literal["patch"] = "patch"
    patch: str = Field(min_length=1, max_length=MAX_SUBMISSION_BYTES)


Submission = Annotated[
    TextSubmission | FilesSubmission | PatchSubmission, Field(discriminator="type")
]
SUBMISSION: TypeAdapter[TextSubmission | FilesSubmission | PatchSubmission] = TypeAdapter(
    Submission
)


def submission_digest(sub: TextSubmission | FilesSubmission | PatchSubmission) -> str:
    """sha256 of the submission's canonical JSON (keys sorted)."""
    text = json.dumps(sub.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
