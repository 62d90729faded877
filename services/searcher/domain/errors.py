"""Searcher domain errors. Each names the gRPC status the edge answers with (`kind`); the message
goes to the caller as is, so it names what is wrong: the field path, the session, the numbers."""

from __future__ import annotations


class SearcherError(Exception):
    kind = "INTERNAL"


class InvalidSpec(SearcherError):
    """The search spec cannot run here (unknown method, missing or bad field)."""

    kind = "INVALID_ARGUMENT"


class InvalidEvent(SearcherError):
    """An event that cannot apply to its session; the session is left unchanged."""

    kind = "INVALID_ARGUMENT"


class InvalidSnapshot(SearcherError):
    """A snapshot this searcher cannot read back."""

    kind = "INVALID_ARGUMENT"


class InvalidRequest(SearcherError):
    """A request field outside the spec, event and snapshot (a missing session id)."""

    kind = "INVALID_ARGUMENT"


class SessionNotFound(SearcherError):
    """No such session here: the caller restores it from its latest snapshot."""

    kind = "NOT_FOUND"


class SessionExists(SearcherError):
    kind = "ALREADY_EXISTS"


class SeqMismatch(SearcherError):
    """The caller's snapshot and the session disagree on how many events were applied."""

    kind = "FAILED_PRECONDITION"
