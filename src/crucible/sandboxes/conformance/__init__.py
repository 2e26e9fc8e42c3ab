"""The conformance suite every provider must pass, through the public Sandbox contract only."""

# The guarantees a reward rests on (isolation, limits, faithful I/O, what grading needs of
# a sandbox), checked so that the suite runs against any provider. Each check makes its
# own small sandbox and always closes it. Checks live in the modules below, one theme
# each, and register themselves with `@check`. The checks that grade with the verifier
# itself are crucible.verifiers.conformance (this package never imports a verifier);
# its suite() is both, what `crucible sandboxes check` runs.

from crucible.sandboxes.conformance import (  # noqa: F401  (registration)
    builds,
    collection,
    exec_limits,
    host_safety,
    isolation_io,
    lifecycle,
    network,
)
from crucible.sandboxes.conformance.core import CHECKS, CheckResult, run_conformance

__all__ = ["CHECKS", "CheckResult", "run_conformance"]
