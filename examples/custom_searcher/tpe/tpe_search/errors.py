"""Errors the searcher answers with. Each names the gRPC status code the edge sends (`code`); the
message goes to the caller as is, so it names the field, the session or the numbers at fault."""

from __future__ import annotations


class SearcherError(Exception):
    code = "INTERNAL"


class InvalidArgument(SearcherError):
    """A spec, event, snapshot or request field that cannot be used; nothing was changed."""

    code = "INVALID_ARGUMENT"


class SessionNotFound(SearcherError):
    """No such session here: the master restores it from its latest snapshot."""

    code = "NOT_FOUND"


class SessionExists(SearcherError):
    code = "ALREADY_EXISTS"


class SeqMismatch(SearcherError):
    """The master's snapshot and the session disagree on how many events were applied."""

    code = "FAILED_PRECONDITION"
