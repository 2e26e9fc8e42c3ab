"""The conformance suite every provider must pass, through the public Sandbox contract only."""

# The guarantees a reward rests on (isolation, limits, grading integrity, faithful I/O),
# checked so that the suite runs against any provider. Each check makes its own small
# sandbox and always closes it. Checks live in the modules below, one theme each, and
# register themselves with `@check`.

from crucible.sandboxes.conformance import (  # noqa: F401  (registration)
    builds,
    collection,
    exec_limits,
    grading,
    host_safety,
    isolation_io,
    network,
)
from crucible.sandboxes.conformance.core import CHECKS, CheckResult, run_conformance

__all__ = ["CHECKS", "CheckResult", "run_conformance"]
