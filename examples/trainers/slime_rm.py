"""slime: a custom reward model (and a group one) graded by a running `crucible serve`.

    crucible serve examples/tasks/hello-file --env local     # prints URL and token
    export CRUCIBLE_SERVE_URL=... CRUCIBLE_SERVE_TOKEN=...
    python examples/trainers/slime_rm.py

In a slime run (export the prompt set with `crucible dataset export`, then):

    --input-key prompt --label-key task_id --metadata-key metadata \
    --custom-rm-path crucible.trainers.slime.rm          # one sample at a time
    --group-rm --custom-rm-path crucible.trainers.slime.group_rm

An unscorable grade returns 0.0 and sets `sample.remove_sample`, so slime drops it.
Options ride on slime's args when set: crucible_submission, crucible_wait_s, crucible_salt.
`crucible.trainers.slime.CrucibleSandbox(task)` is the agent harness's Sandbox over a
session (`crucible serve` with sessions).

This script calls them as slime does, with slime's Sample when it is installed and an
object with the same fields otherwise.
"""

from __future__ import annotations

import asyncio
import json
from argparse import Namespace
from types import SimpleNamespace
from typing import Any

from crucible.trainers.slime import group_rm, rm


def sample(response: str, label: str, index: int) -> Any:
    try:
        from slime.utils.types import Sample  # type: ignore[import-not-found]
    except ImportError:
        return SimpleNamespace(index=index, group_index=0, prompt="", response=response,
                               label=label, metadata={}, remove_sample=False)  # fmt: skip
    return Sample(index=index, group_index=0, response=response, label=label)


async def main() -> None:
    args = Namespace(crucible_submission="files")
    right = json.dumps({"/app/hello.txt": "Hello, crucible!\n"})
    one = sample(right, "hello-file", 0)
    print("rm:", await rm(args, one), "remove_sample:", one.remove_sample)
    group = [sample(right, "hello-file", 1), sample("{}", "hello-file", 2)]
    print("group_rm:", await group_rm(args, group), [s.remove_sample for s in group])


if __name__ == "__main__":
    asyncio.run(main())
