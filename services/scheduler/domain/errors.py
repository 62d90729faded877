"""The one way the scheduler refuses its input."""

from __future__ import annotations


class InvalidScheduleInput(ValueError):
    """The cluster state names something impossible; `field` is its path in the request."""

    kind = "INVALID_ARGUMENT"

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem
