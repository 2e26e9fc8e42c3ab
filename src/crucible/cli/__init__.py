"""The `crucible` command line: one module per command group."""
