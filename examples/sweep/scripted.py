"""Run examples/sweep/sweep.toml over examples/tasks against a scripted model server, then
print the sweep's report: four arms, their paired differences with the baseline.

    python examples/sweep/scripted.py [--jobs-dir DIR] [-k 2]

The server speaks OpenAI chat completions on 127.0.0.1 and plays two models: `solver`
writes the task's solution folder into /tmp/sol and runs it (what a capable model would
do, without being one), `quitter` submits at once. Both speak the tool-call protocol or
the plain-text one, whichever the agent asks in.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "examples" / "tasks"


def solutions() -> dict[str, str]:
    """Each task's instruction (its first line) -> a command recreating and running its
    solution folder."""
    out = {}
    for task in sorted(p for p in TASKS.iterdir() if (p / "task.toml").is_file()):
        parts = ["rm -rf /tmp/sol && mkdir -p /tmp/sol"]
        for f in sorted((task / "solution").rglob("*")):
            if f.is_file():
                rel = f.relative_to(task / "solution")
                parts.append(f"mkdir -p /tmp/sol/{rel.parent} && cat > /tmp/sol/{rel} <<'CRUCIBLE_EOF'\n"
                             f"{f.read_text()}CRUCIBLE_EOF")  # fmt: skip
        parts.append("bash /tmp/sol/solve.sh")
        first = (task / "instruction.md").read_text().strip().splitlines()[0]
        out[first] = "\n".join(parts)
    return out


def reply(body: dict[str, Any], table: dict[str, str]) -> dict[str, Any]:
    messages = body["messages"]
    tools = bool(body.get("tools"))
    acted = any(m["role"] in ("tool", "assistant") for m in messages)
    prompt = " ".join(str(m.get("content")) for m in messages if m["role"] == "user")
    command = next((c for first, c in table.items() if first in prompt), None)
    if body["model"] == "quitter" or acted or command is None:
        message: dict[str, Any] = {"role": "assistant", "content": None if tools else "SUBMIT"}
        call = ("submit", {})
    else:
        message = {"role": "assistant", "content": None if tools else f"```bash\n{command}\n```"}
        call = ("bash", {"command": command})
    if tools:
        message["tool_calls"] = [{"id": f"call-{len(messages)}", "type": "function",
                                  "function": {"name": call[0], "arguments": json.dumps(call[1])}}]  # fmt: skip
    tokens = sum(len(str(m.get("content") or "")) for m in messages) // 4
    return {"id": "scripted", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tools else "stop"}],
            "usage": {"prompt_tokens": tokens, "completion_tokens": len(json.dumps(message)) // 4}}  # fmt: skip


def serve(table: dict[str, str]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            return

        def _send(self, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # the preflight's GET /models
            self._send({"object": "list", "data": [{"id": "solver"}, {"id": "quitter"}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            self._send(reply(body, table))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--jobs-dir", type=Path, default=None, help="default: a temporary folder")
    ap.add_argument("-k", "--attempts", type=int, default=2)
    args = ap.parse_args()
    jobs = args.jobs_dir or Path(tempfile.mkdtemp(prefix="crucible-sweep-"))
    server = serve(solutions())
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    env = {**os.environ, "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "scripted")}
    cli = [sys.executable, "-m", "crucible.cli.main"]
    run = subprocess.run([*cli, "run", str(TASKS), "--sweep", str(Path(__file__).with_name("sweep.toml")),
                          "--model-base-url", url, "-k", str(args.attempts), "-c", "4",
                          "--jobs-dir", str(jobs), "--job-name", "example-sweep"], env=env)  # fmt: skip
    if run.returncode not in (0, 1):
        return run.returncode
    return subprocess.run(
        [*cli, "report", "example-sweep", "--jobs-dir", str(jobs), "--format", "markdown"]
    ).returncode


if __name__ == "__main__":
    sys.exit(main())
