"""A minimal websocket client (RFC 6455) on a plain socket, for tests that talk to a service
through the master's proxy (a Jupyter kernel's channels): text frames out (masked, as clients
must), text frames in, pings answered, nothing else. The services' own venv has no client."""

from __future__ import annotations

import base64
import os
import socket
import struct
from collections.abc import Mapping

_TEXT, _CLOSE, _PING, _PONG = 0x1, 0x8, 0x9, 0xA


class WebSocketError(Exception):
    pass


class WebSocket:
    def __init__(self, sock: socket.socket, leftover: bytes) -> None:
        self._sock = sock
        self._buffer = leftover

    @classmethod
    def connect(
        cls, host: str, port: int, path: str, headers: Mapping[str, str], timeout: float = 30
    ) -> WebSocket:
        sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {host}:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            *(f"{name}: {value}" for name, value in headers.items()),
        ]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            data = sock.recv(4096)
            if not data:
                raise WebSocketError(f"connection closed during the handshake: {head!r}")
            head += data
        head, _, rest = head.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status + b" ":
            sock.close()
            raise WebSocketError(f"handshake refused: {head.decode(errors='replace')}")
        return cls(sock, rest)

    def send_text(self, text: str) -> None:
        self._send(_TEXT, text.encode())

    def _send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        length = len(payload)
        if length < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
        elif length < 1 << 16:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self._sock.sendall(header + mask + masked)

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            data = self._sock.recv(65536)
            if not data:
                raise WebSocketError("connection closed")
            self._buffer += data
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def receive_text(self) -> str:
        """The next text message (fragments joined); pings are answered on the way."""
        parts: list[bytes] = []
        while True:
            first, second = self._read(2)
            opcode, final = first & 0x0F, bool(first & 0x80)
            length = second & 0x7F
            if length == 126:
                (length,) = struct.unpack("!H", self._read(2))
            elif length == 127:
                (length,) = struct.unpack("!Q", self._read(8))
            mask = self._read(4) if second & 0x80 else b""
            payload = self._read(length)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == _PING:
                self._send(_PONG, payload)
                continue
            if opcode == _CLOSE:
                raise WebSocketError("closed by the server")
            if opcode == _PONG:
                continue
            parts.append(payload)
            if final:
                return b"".join(parts).decode()

    def close(self) -> None:
        try:
            self._send(_CLOSE, b"")
        except OSError:
            pass
        self._sock.close()
