"""What an attempt changed outside its own places, as recorded on its trial (result.json
`tamper`), and which of those changes grading could run.

The record is taken once every agent process is gone, from the sandbox's whole writable
layer (local image mode: the overlay's upper dir; docker: the container diff), leaving
out the places an agent is meant to write: the workdir, HOME, /tmp and /logs (and /tests,
which crucible resets). Each change is added, modified or removed; modified and removed
ones existed in the image.

`reaches_grading` is the rule `--tampered zero` applies (docs/concepts/trust.md): a change counts
against the attempt when it is
- a modified or removed file of the image that is code: an executable (an exec bit, or
  anywhere in a bin/sbin dir), a library (*.so*, the loader, anything under a lib dir,
  the loader's configuration /etc/ld.so.*), or an interpreter or its modules (python,
  perl, ruby, node, the shells; site-packages, dist-packages, node_modules; *.py, *.pyc,
  *.pth, *.pl, *.pm, *.rb, *.js, *.sh);
- or an added file that takes precedence over the image's own code: an executable in a
  PATH dir that shadows one of the same name later on PATH (`shadows`), or a start-up
  hook every interpreter run loads (*.pth, sitecustomize, usercustomize, ld.so.preload).
Other added files (a package the agent installed, apt's lists, a log) are recorded, never
counted against it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ChangeKind = Literal["added", "modified", "removed"]
TamperPolicy = Literal["flag", "zero"]
TAMPER_POLICIES: tuple[str, ...] = ("flag", "zero")
# The words of the older tampered_paths list, kept for old readers.
_OLD_WORD = {"added": "added", "modified": "changed", "removed": "deleted"}


class SystemChange(BaseModel):
    path: str
    kind: ChangeKind
    executable: bool = False
    library: bool = False
    interpreter: bool = False  # an interpreter, or its modules and start-up hooks
    # An added file that grading would find first: a command that shadows the image's one
    # of the same name, or a start-up hook (*.pth, sitecustomize, ld.so.preload).
    shadows: bool = False

    @property
    def code(self) -> bool:
        return self.executable or self.library or self.interpreter

    @property
    def reaches_grading(self) -> bool:
        if self.kind == "added":
            return self.shadows
        return self.code

    def marks(self) -> str:
        """ "modified, executable" and the like, for a reason or a report."""
        flags = [f for f in ("executable", "library", "interpreter", "shadows") if getattr(self, f)]
        return ", ".join([self.kind, *flags])


class TamperRecord(BaseModel):
    """The changes (sorted by path, at most `cap`), how many there were in all, and whether
    the list was cut (the walk stops at its entry cap too: `n_total` is then a floor)."""

    changes: list[SystemChange] = Field(default_factory=list)
    n_total: int = 0
    truncated: bool = False
    # The walk of the layer stopped at its entry cap: changes past it were never looked at,
    # so the record cannot vouch that none reaches grading (`zero` counts it 0).
    walk_cut: bool = False
    # Set when --tampered zero counted the trial 0 for these changes.
    zeroed: bool = False

    @property
    def reaching(self) -> list[SystemChange]:
        return [c for c in self.changes if c.reaches_grading]

    def as_paths(self) -> list[str]:
        """The older `tampered_paths` form: "added /usr/bin/x", "changed ...", "deleted ..."."""
        out = [f"{_OLD_WORD[c.kind]} {c.path}" for c in self.changes]
        if self.truncated:
            out.append(f"... {self.n_total - len(self.changes)} more")
        return out

    @property
    def counts_against(self) -> bool:
        """What `--tampered zero` counts 0: a change grading could run, or a walk cut short
        (an agent that buried its change under decoys past the cap)."""
        return self.walk_cut or bool(self.reaching)

    def reason(self, limit: int = 5) -> str:
        """Why `--tampered zero` counts it 0: the changes grading could run, with their marks."""
        hits = self.reaching
        if self.walk_cut and not hits:
            return (
                "tampered: the attempt changed more paths outside its own places than the "
                f"record walks ({self.n_total}+ seen, the walk was cut), so none can be "
                "vouched for (--tampered zero)"
            )
        listed = "; ".join(f"{c.path} ({c.marks()})" for c in hits[:limit])
        more = f"; and {len(hits) - limit} more" if len(hits) > limit else ""
        return (
            "tampered: the attempt changed files of the image that grading can run "
            f"(--tampered zero): {listed}{more}"
        )
