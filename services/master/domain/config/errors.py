"""The one exception the configuration package raises: every problem found, each naming its field."""

from __future__ import annotations


class ConfigError(Exception):
    """An experiment configuration that cannot be used, with one readable message per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))
