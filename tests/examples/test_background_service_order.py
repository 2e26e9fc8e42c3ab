"""The background-service example's oracle: the service finishes its bookkeeping
(the request consumed, the log line written) before it publishes a response.

The client returns as soon as a response appears, and the agent phase may end
right then (every agent process killed, the service included): anything the
service does after publishing can be lost, and the verifier checks it. The test
runs the example's server.sh on a scratch spool, with `mv` wrapped so that the
moment the response is published it records what the service had done by then.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.helpers.wait import wait_until

SERVER = (
    Path(__file__).resolve().parents[2] / "examples/tasks/background-service/solution/server.sh"
)

MV_SHIM = """#!/usr/bin/env bash
# The real mv, then (for a published response) what the service had done by then.
"$REAL_MV" "$@" || exit $?
dest="${@: -1}"
case "$dest" in
    *.resp)
        id=$(basename "$dest" .resp)
        if [ -e "$SPOOL/in/$id.req" ]; then req=present; else req=consumed; fi
        if grep -qsx "$id" "$SPOOL/served.log"; then logged=yes; else logged=no; fi
        echo "$id req=$req logged=$logged" >> "$SPOOL/../published.txt"
        ;;
esac
"""


def test_the_service_publishes_its_response_last(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    (spool / "in").mkdir(parents=True)
    (spool / "out").mkdir()
    server = tmp_path / "server.sh"
    server.write_text(SERVER.read_text().replace("/app/spool", str(spool)))
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "mv").write_text(MV_SHIM)
    (shims / "mv").chmod(0o755)
    real_mv = subprocess.run(["bash", "-c", "command -v mv"], capture_output=True, text=True)
    env = {
        **os.environ,
        "PATH": f"{shims}:{os.environ['PATH']}",
        "REAL_MV": real_mv.stdout.strip(),
        "SPOOL": str(spool),
    }
    proc = subprocess.Popen(["bash", str(server)], env=env, start_new_session=True)
    try:
        for rid, text in (("one", "alpha"), ("two", "beta")):
            (spool / "in" / f"{rid}.tmp").write_text(text + "\n")
            (spool / "in" / f"{rid}.tmp").rename(spool / "in" / f"{rid}.req")
            wait_until(lambda rid=rid: (spool / "out" / f"{rid}.resp").exists(), f"response {rid}")
        published = tmp_path / "published.txt"
        # The shim writes its line after the real mv: wait for both lines, not the first.
        lines = wait_until(
            lambda: (
                published.exists()
                and len(published.read_text().splitlines()) >= 2
                and published.read_text().splitlines()
            ),
            "both responses recorded by the mv shim",
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert lines == ["one req=consumed logged=yes", "two req=consumed logged=yes"]
    assert (spool / "out" / "one.resp").read_text() == "ALPHA\n"
    assert not list((spool / "out").glob("*.tmp"))
