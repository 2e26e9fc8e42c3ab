"""Collection from a Modal sandbox (the SDK stand-in, real execs): the collection
conformance checks hold, and a tar the provider must stage on the host before
reading it is cut inside the sandbox at what the collection can still take, so a
1 GiB file never reaches the host's disk."""

from __future__ import annotations

from typing import Any

from tests.sandboxes.modal_fixtures import make
from tests.sandboxes.modal_standin import World

from crucible.sandboxes.collect.manifest import Limits
from crucible.sandboxes.conformance import run_conformance

CHECKS = [
    "collect_links_never_followed",
    "collect_sparse_file_capped",
    "collect_entries_capped",
    "collect_fifo_not_read",
]


async def test_collection_from_modal_is_capped_before_it_reaches_the_host(
    standin: tuple[Any, World],
) -> None:
    provider = await make(standin)
    try:
        results = await run_conformance(provider, only=CHECKS, spec_overrides={"image": "d:1"})
    finally:
        await provider.aclose()
    failed = {r.name: r.detail for r in results if not r.passed}
    assert not failed
    staged = [kw["size"] for kw in standin[1].called("SandboxFilesystem.copy_to_local")]
    lim = Limits()
    assert staged, "nothing was staged: the test did not reach the staged path"
    # The 1 GiB sparse file's tar: cut at the budget plus a header per entry left.
    assert max(staged) <= lim.total_bytes + 1024 * (lim.entries + 2) + 10240 + 1
