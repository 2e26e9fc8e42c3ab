"""The taskset module a verifiers run names (`--env.taskset.id crucible_tasks`): verifiers
imports a taskset by module name and takes the one Taskset in `__all__`."""

from crucible.trainers.verifiers import CrucibleTaskset

__all__ = ["CrucibleTaskset"]
