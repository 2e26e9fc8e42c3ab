"""`--task-env NAME` and `--task-env-file FILE`: the host variables a task's `${VAR}` may read.

Shared by every command that loads tasks to run or check them (`run`, `tasks check`,
`tasks list`). Without them a task reads no host variable at all (tasks/hostvars.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from crucible.cli.common import fail
from crucible.errors import ExitCode

if TYPE_CHECKING:
    from crucible.tasks.hostvars import HostEnv

TaskEnvOpt = typer.Option(
    [],
    "--task-env",
    metavar="NAME",
    help="Let tasks read host variable NAME through ${NAME} (repeatable). No other host "
    "variable is ever read; credentials (*_API_KEY, *_TOKEN*, *SECRET*, MODAL_*, "
    "CRUCIBLE_*, AWS_*...) cannot be allowed.",
)
TaskEnvFileOpt = typer.Option(
    None,
    "--task-env-file",
    metavar="FILE",
    help="A file of host variable names tasks may read, one a line (# comments).",
)


def task_env_names(names: list[str], file: Path | None, as_json: bool) -> list[str] | None:
    """The allowed names, checked (a credential or a bad name is a usage error); None
    when neither option was given (a resumed job then keeps the names it ran with)."""
    from crucible.tasks.hostvars import HostEnv, HostEnvRefused, read_names_file

    if not names and file is None:
        return None
    allowed = list(names)
    try:
        if file is not None:
            allowed += read_names_file(file)
        HostEnv(allowed)  # refuses credentials and malformed names, saying why
    except FileNotFoundError:
        fail(
            ExitCode.NOT_FOUND,
            "not_found",
            f"--task-env-file {file}: no such file",
            as_json=as_json,
        )
    except (HostEnvRefused, OSError, UnicodeDecodeError) as exc:
        fail(ExitCode.USAGE, "usage", str(exc), as_json=as_json)
    return sorted(set(allowed))


def host_env(names: list[str], file: Path | None, as_json: bool) -> HostEnv:
    """The `HostEnv` these options allow, its values taken from this process's environment."""
    import os

    from crucible.tasks.hostvars import HostEnv

    return HostEnv(task_env_names(names, file, as_json) or [], os.environ)
