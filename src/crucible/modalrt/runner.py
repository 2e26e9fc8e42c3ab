"""The program's process: `python -m crucible.modalrt.runner [--entry NAME] [--script] -- ARGS`.

It imports the program with the offline SDK, starts the entrypoint, prints a failure's
traceback as `modal run` does, stops the containers (their @exit hooks run), and exits
0 (ok), 1 (the program failed), 2 (bad entrypoint or arguments) or 6 (a GPU function
needed CUDA and this machine has no GPU).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import traceback
from pathlib import Path

from crucible.errors import ExitCode
from crucible.modalrt.context import SERVE_MARKER, config, emit
from crucible.modalrt.entry import UsageError, parse_args, pick
from crucible.modalrt.invoke import NEEDS_GPU
from crucible.modalrt.pool import close_pools
from crucible.modalrt.program import import_program, run_as_main

EXIT_OK, EXIT_FAILED, EXIT_USAGE = ExitCode.OK, ExitCode.ERROR, ExitCode.USAGE
EXIT_NEEDS_GPU = ExitCode.NEEDS_GPU
_HERE = str(Path(__file__).resolve().parent)


_FUTURES = str(Path(concurrent.futures.__file__).resolve().parent)


def _print_failure(exc: BaseException) -> None:
    """The traceback without the runtime's own frames: what the program did. The remote
    traceback follows it, as a note."""
    te = traceback.TracebackException.from_exception(exc)
    te.stack = traceback.StackSummary.from_list(
        [f for f in te.stack if not f.filename.startswith((_HERE, _FUTURES))]
    )
    sys.stderr.write("".join(te.format()))


def _serve() -> int:
    """Serve every web endpoint until stdin closes; the URLs go out as one marked line."""
    from crucible.modalrt.sdk.registry import REGISTRY

    urls = {
        name: fn.get_web_url()
        for name, fn in REGISTRY.functions.items()
        if fn.get_web_url() is not None
    }
    for tag, cls_obj in REGISTRY.classes.items():
        for name, member in vars(cls_obj._user_cls).items():
            if getattr(member, "flags", {}).get("web"):
                urls[f"{tag}.{name}"] = getattr(cls_obj(), name).get_web_url()
    sys.stdout.write(SERVE_MARKER + json.dumps(urls) + "\n")
    sys.stdout.flush()
    sys.stdin.read()
    return EXIT_OK


def _run(entry: str | None, script: bool, args: list[str], serve: bool = False) -> int:
    cfg = config()
    program = Path(cfg.program)
    if script:
        emit("entry", entry_kind="script")
        sys.argv = [str(program), *args]
        run_as_main(program, cfg.module)
        return EXIT_OK
    import_program(program, cfg.module)
    if serve:
        return _serve()
    call, sig_f = pick(entry)
    call(**parse_args(sig_f, args))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crucible.modalrt.runner")
    parser.add_argument("--entry")
    parser.add_argument("--script", action="store_true")
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("args", nargs="*")
    ns = parser.parse_args(argv)
    emit("start", entry=ns.entry, script=ns.script, args=ns.args)
    error: str | None = None
    try:
        code = _run(ns.entry, ns.script, ns.args, ns.serve)
    except UsageError as exc:
        sys.stderr.write(f"Usage error: {exc}\n")
        code, error = EXIT_USAGE, str(exc)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        error = None if code == 0 else f"SystemExit({exc.code!r})"
    except BaseException as exc:
        _print_failure(exc)
        code, error = EXIT_FAILED, f"{type(exc).__name__}: {exc}"
    finally:
        sys.stdout.flush()
        close_pools()
    if NEEDS_GPU:
        function, why = NEEDS_GPU[0]
        sys.stderr.write(
            f"needs a GPU: {function} asked for a GPU and failed without one ({why})\n"
        )
        code = EXIT_NEEDS_GPU
    emit("end", exit_code=code, error=error)
    return code


if __name__ == "__main__":
    sys.exit(main())
