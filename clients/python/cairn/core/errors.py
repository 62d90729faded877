"""Errors of the Core API that training code may see or raise."""

from __future__ import annotations

import grpc


class InvalidHP(Exception):
    """Raise inside `with cairn.core.init() ...` when the trial's hyperparameters cannot work.

    The context reports the early exit (INVALID_HP) to the master, which lets the searcher replace
    the trial, and ends the process with exit code 0, as Determined's `det.InvalidHP` does.
    """


class CoreApiError(Exception):
    """Something the Core API could not do for training code; the message says what and why."""


class ClusterInfoError(CoreApiError):
    """The task environment the master and agent set is missing or malformed."""


class MasterCallError(CoreApiError):
    """A call to the master failed for good (a refusal, or no answer within the retry window)."""

    def __init__(self, message: str, code: grpc.StatusCode | None) -> None:
        super().__init__(message)
        self.code = code


class MetricsReportError(CoreApiError):
    """Reported metrics could not be stored; raised on the next call into the API and at exit,
    so that no metric is lost without the training code hearing of it."""


class SearcherNotConfiguredError(CoreApiError):
    """`searcher.operations()` was used but the experiment gives the searcher no training length."""
