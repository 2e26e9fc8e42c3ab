"""Reading a grade request leniently where the policy is at fault: an item whose
submission is malformed (an empty patch, a relative path, an unknown type) is answered
`invalid` with reward 0 and its reason, and starts no sandbox, while the rest of the
batch is graded. Anything else malformed (the envelope, an id, a task reference) is
the client's bug: 422 for the whole request."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ValidationError

from crucible.records.serve import GradeRequest

# What a malformed submission is replaced by to read the rest of its item; never graded.
_PLACEHOLDER = {"type": "text", "text": ""}


def _submission_errors(exc: ValidationError) -> dict[int, str] | None:
    """{item index: why} when every error is inside some item's submission, else None."""
    bad: dict[int, list[str]] = {}
    for err in exc.errors():
        loc = err["loc"]
        if len(loc) < 3 or loc[0] != "items" or not isinstance(loc[1], int):
            return None
        if loc[2] != "submission":
            return None
        where = ".".join(str(p) for p in loc[3:])
        bad.setdefault(loc[1], []).append(f"{where + ': ' if where else ''}{err['msg']}")
    return {i: "malformed submission: " + "; ".join(msgs)[:1000] for i, msgs in bad.items()}


def read_grade_request(body: Any) -> tuple[GradeRequest, dict[int, str]]:
    """The request, and the items (by index) whose submission is malformed, with why.
    Raises ValidationError for anything else."""
    try:
        return GradeRequest.model_validate(body), {}
    except ValidationError as exc:
        bad = _submission_errors(exc)
        if bad is None:
            raise
    patched = copy.copy(body)
    patched["items"] = list(body["items"])
    for i in bad:
        patched["items"][i] = {**body["items"][i], "submission": _PLACEHOLDER}
    return GradeRequest.model_validate(patched), bad
