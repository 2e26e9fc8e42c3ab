"""What a local sandbox needs from its provider, handed over as one explicit object.

The provider makes a `SandboxHost` for each sandbox it creates; the sandbox
never reaches into the provider itself (and so never imports it).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crucible.sandboxes.local.pool import SlotPool


@dataclass(frozen=True)
class SandboxHost:
    sh: str  # the host's dash (init.find_sh): the sandbox's pid 1 when the slot has no init
    pool: SlotPool  # the sandbox's slot goes back here on close
    live: weakref.WeakSet[Any]  # the provider's open sandboxes, closed at shutdown
    etc_dir: Callable[[bool], Path]  # the /etc to mount, by network access
    bwrap: Callable[[], str]  # path of the bwrap binary
