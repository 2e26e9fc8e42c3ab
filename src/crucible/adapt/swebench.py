"""`crucible adapt swebench`: SWE-bench instances -> Harbor tasks graded offline.

Each instance becomes a task whose instruction is the problem statement, whose
environment is the instance's evaluation image (the official name from the swebench
package's TestSpec.instance_image_key with the `swebench` namespace, or a template)
with /testbed as the workdir, whose oracle applies the gold patch, and whose tests run
the official eval script, written now from the package's spec (make_test_spec: the
repository's test command, the test patch, the reset of the test files). The log is
graded on the host by the swebench stage (verifiers/stages/swebench.py), with the
official parser and resolution rule: no network, no swebench in the image.

The eval script is the package's, with one change: its two marker lines (`: '>>>>>
Start Test Output'`, `: '>>>>> End Test Output'`) print the marker followed by the
nonce test.sh drew, so the stage reads only what the test command printed.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, ClassVar

from crucible.adapt.base import Adapter, AdapterOptions, AdaptError, TaskFiles
from crucible.adapt.sources import load_rows
from crucible.verifiers.stages.swebench import BEGIN_TAG, END, INSTANCE_FILE, START

NAMESPACE = "swebench"  # the official images' namespace on their registry
REQUIRED = ("instance_id", "repo", "base_commit", "version", "patch", "test_patch")
LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")
NONCE_VAR = "crucible_nonce"

TEST_SH = f"""\
#!/bin/bash
# crucible: the instance's official eval script (eval.sh, written at adapt time from the
# swebench package's spec), run in this shell's subshell so that the nonce drawn here
# from the kernel is never exported, never on a command line. The host parses only the
# test command's output between the nonce-stamped markers (the swebench stage).
read -r {NONCE_VAR} < /proc/sys/kernel/random/uuid || exit 1
{NONCE_VAR}=${{{NONCE_VAR}//-/}}
printf '%s %s\\n' {shlex.quote(BEGIN_TAG)} "${NONCE_VAR}"
( . "${{0%/*}}/eval.sh" ) 2>&1
rc=$?
printf '%s %s %s\\n' {shlex.quote(BEGIN_TAG + "-end")} "${NONCE_VAR}" "$rc"
unset {NONCE_VAR}
# The eval ran to its end: the swebench stage (a gate) decides whether this counts.
mkdir -p /logs/verifier && printf 1 > /logs/verifier/reward.txt
"""

SOLVE_SH = """\
#!/bin/bash
# The gold patch, applied as the official harness applies a prediction: git apply, then
# git apply --reject, then patch with fuzz.
cd /testbed || exit 1
p="${0%/*}/gold.patch"
git apply --verbose "$p" && exit 0
git apply --verbose --reject "$p" && exit 0
patch --batch --fuzz=5 -p1 -i "$p" && exit 0
echo "crucible: the gold patch did not apply" >&2
exit 1
"""


class SwebenchOptions(AdapterOptions):
    ids: list[str] = []  # only these instance ids (all when empty)
    # {image} the official name, {id} the instance id lowercased with "__" as "_1776_",
    # {instance_id}, {repo}, {version}; default: the official name.
    image_template: str = "{image}"
    split: str = "test"
    agent_timeout_sec: float = 3000.0
    verifier_timeout_sec: float = 1800.0


def _spec(row: dict[str, Any]) -> Any:
    from crucible.verifiers.stages.swebench import test_spec

    return test_spec(row)


def instance(row: dict[str, Any]) -> dict[str, Any]:
    """The row as the harness reads it: the required keys present, the test lists as
    lists (SWE-bench's files store them as JSON strings)."""
    missing = [k for k in REQUIRED if not row.get(k)]
    iid = row.get("instance_id", "?")
    if missing:
        raise AdaptError(f"instance {iid}: missing {', '.join(missing)}")
    out = {k: v for k, v in row.items() if isinstance(v, str | int | float | bool | list)}
    out["version"] = str(row["version"])
    for key in LISTS:
        value = row.get(key, [])
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise AdaptError(f"instance {iid}: {key} is not a JSON list") from exc
        if not (isinstance(value, list) and all(isinstance(t, str) for t in value)):
            raise AdaptError(f"instance {iid}: {key} must be a list of test names")
        out[key] = value
    return out


def image_name(inst: dict[str, Any], template: str = "{image}") -> str:
    """The evaluation image: the official key (swebench's own TestSpec.instance_image_key,
    namespace `swebench`), or `template` filled in."""
    from crucible.verifiers.stages.swebench import test_spec

    official = test_spec(inst, namespace=NAMESPACE).instance_image_key
    short = inst["instance_id"].lower().replace("__", "_1776_")
    try:
        return template.format(
            image=official,
            id=short,
            instance_id=inst["instance_id"],
            repo=inst["repo"],
            version=inst["version"],
        )
    except (KeyError, IndexError, ValueError) as exc:
        raise AdaptError(f"--image-template {template!r}: {exc!r}") from exc


def eval_script(spec: Any) -> str:
    """The official eval script of `spec`, its two markers stamped with the nonce."""
    script: str = spec.eval_script
    lines = script.split("\n")
    for marker in (START, END):
        plain = f": '{marker}'"
        if lines.count(plain) != 1:
            raise AdaptError(
                f"{spec.instance_id}: the swebench eval script has {lines.count(plain)} "
                f"{marker!r} lines, not one (a swebench this adapter does not know)"
            )
        lines[lines.index(plain)] = f"printf '%s %s\\n' {shlex.quote(marker)} \"${NONCE_VAR}\""
    return "\n".join(lines)


def task_toml(inst: dict[str, Any], image: str, opts: SwebenchOptions) -> str:
    meta = {
        "source": "swebench",
        "instance_id": inst["instance_id"],
        "repo": inst["repo"],
        "version": inst["version"],
        "base_commit": inst["base_commit"],
        "category": inst["repo"],
    }
    lines = ['schema_version = "1.1"', "", "[metadata]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in meta.items()]
    lines += ["", "[[metadata.crucible.stages]]", 'kind = "swebench"', 'role = "gate"']
    lines += ["", "[agent]", f"timeout_sec = {opts.agent_timeout_sec}"]
    lines += ["", "[verifier]", f"timeout_sec = {opts.verifier_timeout_sec}"]
    lines += ["", "[environment]", f"docker_image = {json.dumps(image)}", 'workdir = "/testbed"']
    return "\n".join(lines) + "\n"


class SwebenchAdapter(Adapter):
    name: ClassVar[str] = "swebench"
    summary: ClassVar[str] = "SWE-bench instances -> tasks graded by the official harness"
    options_type: ClassVar[type[AdapterOptions]] = SwebenchOptions
    options: SwebenchOptions

    def rows(self, source: str) -> list[dict[str, Any]]:
        rows = load_rows(source, self.options.split)
        wanted = self.options.ids
        if not wanted:
            return rows
        by_id = {r.get("instance_id"): r for r in rows}
        absent = [i for i in wanted if i not in by_id]
        if absent:
            raise AdaptError(f"{source}: no instance {', '.join(absent[:10])}")
        return [by_id[i] for i in wanted]

    def task(self, row: dict[str, Any]) -> TaskFiles:
        inst = instance(row)
        spec = _spec(inst)
        image = image_name(inst, self.options.image_template)
        statement = str(inst.get("problem_statement") or "").strip()
        if not statement:
            raise AdaptError(f"instance {inst['instance_id']}: no problem_statement")
        kept = {k: inst[k] for k in (*REQUIRED, *LISTS)}
        files = {
            "task.toml": task_toml(inst, image, self.options),
            "instruction.md": statement + "\n",
            "solution/solve.sh": SOLVE_SH,
            "solution/gold.patch": _patch_text(inst["patch"]),
            "tests/test.sh": TEST_SH,
            "tests/eval.sh": eval_script(spec) + "\n",
            f"tests/{INSTANCE_FILE}": json.dumps(kept, indent=1) + "\n",
        }
        return TaskFiles(
            name=inst["instance_id"],
            files=files,
            executable={"solution/solve.sh", "tests/test.sh", "tests/eval.sh"},
        )


def _patch_text(patch: str) -> str:
    return patch if patch.endswith("\n") else patch + "\n"
