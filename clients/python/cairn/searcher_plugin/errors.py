"""The errors a searcher answers with. Each names the gRPC status code its edge sends (`kind`, a
`grpc.StatusCode` name); the message goes to the caller as is, so it names what is wrong: the field
path, the session, the numbers. Search code raises these and knows nothing of gRPC."""

from __future__ import annotations


class SearcherError(Exception):
    kind = "INTERNAL"


class InvalidArgument(SearcherError):
    """Something the caller sent cannot be used; nothing was changed."""

    kind = "INVALID_ARGUMENT"


class InvalidSpec(InvalidArgument):
    """The search spec cannot run here (unknown method, missing or bad field)."""


class InvalidEvent(InvalidArgument):
    """An event that cannot apply to its session; the session is left unchanged."""


class InvalidSnapshot(InvalidArgument):
    """A snapshot this searcher cannot read back."""


class InvalidRequest(InvalidArgument):
    """A request field outside the spec, event and snapshot (a missing session id)."""


class SessionNotFound(SearcherError):
    """No such session here: the caller restores it from its latest snapshot."""

    kind = "NOT_FOUND"


class SessionExists(SearcherError):
    kind = "ALREADY_EXISTS"


class SeqMismatch(SearcherError):
    """The caller's snapshot and the session disagree on how many events were applied."""

    kind = "FAILED_PRECONDITION"
