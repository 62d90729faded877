"""A session with a master: one channel, the public API stub, and the user's token on every call."""

from __future__ import annotations

from types import TracebackType

from cairn.api.v1 import api_pb2_grpc
from cairn.client.address import MasterEndpoints
from cairn.client.channel import DEFAULT_CALL_TIMEOUT_S, open_channel
from cairn.tls import ca_from_environment, channel_credentials


class Session:
    """Calls go through `session.api` (the generated `Cairn` stub); close it when done."""

    def __init__(
        self,
        master: MasterEndpoints,
        token: str | None = None,
        *,
        username: str | None = None,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT_S,
    ) -> None:
        self.master = master
        self.token = token
        self.username = username
        # TLS when a CA is given ($CAIRN_MASTER_CERT, which the CLI's --master-cert sets) or the
        # address asks for it (grpcs://); the certificate is always verified.
        ca_pem = ca_from_environment()
        credentials = channel_credentials(ca_pem) if ca_pem or master.tls else None
        self._channel, self._base_channel = open_channel(master.dial_target, token, call_timeout, credentials)
        self.api = api_pb2_grpc.CairnStub(self._channel)

    def close(self) -> None:
        self._base_channel.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
