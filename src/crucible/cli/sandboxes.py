"""`crucible sandboxes check|cleanup`: run the conformance suite against a
provider, and remove what crashed jobs left behind."""

from __future__ import annotations

import asyncio

import typer
from rich.markup import escape

from crucible.cli.common import JsonOpt, console, fail, fail_from, print_json
from crucible.errors import CrucibleError, ExitCode

sandboxes_app = typer.Typer(
    name="sandboxes",
    help="Check a sandbox provider against the conformance suite; clean up leftovers.",
    no_args_is_help=True,
)

EnvOpt = typer.Option("local", "--env", "-e", help="Provider: local, docker, modal, ...")
EnvParamOpt = typer.Option(
    [], "--env-param", help="Provider parameter k=v (repeatable), e.g. image=NAME for docker."
)


def register(app: typer.Typer) -> None:
    app.add_typer(sandboxes_app, name="sandboxes")


def parse_params(pairs: list[str], as_json: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(ExitCode.USAGE, "usage", f"--env-param wants k=v, got {pair!r}", as_json=as_json)
        out[key.strip()] = value
    return out


def provider_or_fail(  # type: ignore[no-untyped-def]
    env: str, params: dict[str, str], as_json: bool, also: tuple[str, ...] = ()
):
    """The provider, or exit 2 for an unknown provider, env-param key or value."""
    from crucible.sandboxes.registry import get_provider

    try:
        return get_provider(env, params, also=also)
    except KeyError as exc:
        fail(ExitCode.USAGE, "usage", str(exc.args[0]), as_json=as_json)
    except (TypeError, ValueError) as exc:
        fail(ExitCode.USAGE, "usage", f"provider {env!r}: {exc}", as_json=as_json)
    except CrucibleError as exc:
        fail_from(exc, as_json=as_json)


@sandboxes_app.command("check")
def check(
    env: str = EnvOpt,
    env_param: list[str] = EnvParamOpt,
    only: list[str] = typer.Option([], "--only", help="Run only this check (repeatable)."),
    as_json: bool = JsonOpt,
) -> None:
    """Run the conformance suite (isolation, limits, grading integrity, file I/O).

    Exit 1 if any check fails. Checks that need a base image (docker) take it
    from --env-param image=NAME. On local, --env-param userland=image runs the
    suite on an image (debian:bookworm-slim, or image=NAME) instead of the host's userland.
    """
    from crucible.sandboxes.conformance import run_conformance
    from crucible.verifiers.conformance import suite

    checks = suite()  # the providers' own checks and grading's
    params = parse_params(env_param, as_json)
    unknown = [n for n in only if n not in checks]
    if unknown:
        fail(
            ExitCode.USAGE,
            "usage",
            f"unknown check(s): {', '.join(unknown)}",
            hint=f"known: {', '.join(checks)}",
            as_json=as_json,
        )
    provider = provider_or_fail(env, params, as_json, also=("image",))  # the suite's image
    overrides = {"image": params["image"]} if "image" in params else {}

    async def go():  # type: ignore[no-untyped-def]
        try:
            await provider.preflight()
            return await run_conformance(
                provider, only=only or None, spec_overrides=overrides, checks=checks
            )
        finally:
            await provider.aclose()

    try:
        results = asyncio.run(go())
    except CrucibleError as exc:
        fail_from(exc, as_json=as_json)
    failed = [r for r in results if not r.passed]
    if as_json:
        print_json(
            {
                "provider": env,
                "passed": not failed,
                "checks": [r.model_dump() for r in results],
                "summary": {
                    "checks": len(results),
                    "passed": len(results) - len(failed),
                    "failed": len(failed),
                },
            }
        )
    else:
        from rich.table import Table

        table = Table(title=f"conformance: {env}", show_lines=False)
        table.add_column("check")
        table.add_column("result")
        table.add_column("time", justify="right")
        table.add_column("detail", overflow="fold")
        for r in results:
            mark = "[green]pass[/]" if r.passed else "[bold red]FAIL[/]"
            table.add_row(r.name, mark, f"{r.duration_sec:.2f}s", escape(r.detail))
        console.print(table)
        console.print(
            f"{len(results) - len(failed)}/{len(results)} passed"
            + (f", [red]{len(failed)} failed[/]" if failed else "")
        )
    if failed:
        raise typer.Exit(ExitCode.ERROR)


@sandboxes_app.command("cleanup")
def cleanup(
    env: str = EnvOpt,
    env_param: list[str] = EnvParamOpt,
    job: str | None = typer.Option(
        None, "--job", help="Only this job's leftovers (default: every job's)."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Kill and remove sandboxes (and their cgroups, scratch dirs, containers) a job left behind."""
    params = parse_params(env_param, as_json)
    provider = provider_or_fail(env, params, as_json)

    async def go() -> int:
        try:
            return await provider.cleanup(job)
        finally:
            await provider.aclose()

    try:
        removed = asyncio.run(go())
    except CrucibleError as exc:
        fail_from(exc, as_json=as_json)
    if as_json:
        print_json({"provider": env, "job": job, "removed": removed})
    else:
        console.print(
            f"removed {removed} sandbox(es) left by {'job ' + job if job else 'any job'} on {env}"
        )
