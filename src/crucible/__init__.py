"""crucible: run verifiable agent tasks and their verifiers at scale."""

__version__ = "0.1.0"
