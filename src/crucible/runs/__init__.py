"""Reading jobs from another terminal: queries, logs, trace export and cancel for `crucible runs`."""
