"""Task generation by self-play: setter protocol, solver, checks, archive, hardening, loop, report."""
