"""The server's half of the websocket protocol (RFC 6455), as much as the master's TCP proxy needs:
the opening handshake's answer, reading a client's frames (masked, bounded) and writing its own
(unmasked). Messages are not reassembled: the TCP proxy carries a byte stream, so each data
frame's payload is passed on as it comes, whatever message it is part of."""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

# RFC 6455 §1.3: the GUID a server appends to the client's key.
_ACCEPT_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
# A frame's payload over this is refused before it is read (Determined's tunnel sends 4 KiB).
MAX_FRAME_BYTES = 1024 * 1024
# Control frames carry at most this (§5.5).
_MAX_CONTROL_BYTES = 125


class Opcode(IntEnum):
    CONTINUATION = 0x0
    TEXT = 0x1
    BINARY = 0x2
    CLOSE = 0x8
    PING = 0x9
    PONG = 0xA


DATA_OPCODES = frozenset({Opcode.CONTINUATION, Opcode.TEXT, Opcode.BINARY})

# Close codes (§7.4.1).
CLOSE_NORMAL = 1000
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_TOO_BIG = 1009


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes | None: ...


class FrameError(Exception):
    """The client broke the protocol; `code` is the close code that says how."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Frame:
    opcode: Opcode
    payload: bytes


def handshake_error(headers: dict[str, str]) -> str | None:
    """Why a request (its headers, names lower-cased) is not a websocket opening handshake this
    server accepts; None when it is one."""
    if (headers.get("upgrade") or "").strip().lower() != "websocket":
        return "Upgrade: the proxy tunnels a task's TCP port over a websocket (Upgrade: websocket)"
    if (headers.get("sec-websocket-version") or "").strip() != "13":
        return "Sec-WebSocket-Version: only version 13 is spoken"
    key = (headers.get("sec-websocket-key") or "").strip()
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            raise ValueError
    except ValueError:
        return "Sec-WebSocket-Key: not the base64 of 16 bytes"
    return None


def accept_value(key: str) -> str:
    """Sec-WebSocket-Accept for the client's Sec-WebSocket-Key."""
    return base64.b64encode(hashlib.sha1(key.strip().encode() + _ACCEPT_GUID).digest()).decode()


def switching_protocols(key: str) -> bytes:
    """The server's answer to an accepted handshake."""
    return (
        "HTTP/1.1 101 Switching Protocols\r\n"
        "Upgrade: websocket\r\n"
        "Connection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept_value(key)}\r\n\r\n"
    ).encode("latin-1")


def _read_exactly(stream: Readable, n: int) -> bytes | None:
    data = stream.read(n) if n else b""
    if data is None or len(data) < n:
        return None
    return data


def read_frame(stream: Readable, limit: int = MAX_FRAME_BYTES) -> Frame | None:
    """The client's next frame, unmasked; None when the connection ended. FrameError when the
    frame breaks the protocol or its payload is over `limit` bytes (known before it is read)."""
    head = _read_exactly(stream, 2)
    if head is None:
        return None
    first, second = head
    if first & 0x70:
        raise FrameError(CLOSE_PROTOCOL_ERROR, "reserved bits set without an extension")
    try:
        opcode = Opcode(first & 0x0F)
    except ValueError:
        raise FrameError(CLOSE_PROTOCOL_ERROR, f"unknown opcode {first & 0x0F:#x}") from None
    if not second & 0x80:
        raise FrameError(CLOSE_PROTOCOL_ERROR, "a client's frames must be masked")
    length = second & 0x7F
    if length == 126:
        extended = _read_exactly(stream, 2)
        if extended is None:
            return None
        (length,) = struct.unpack("!H", extended)
    elif length == 127:
        extended = _read_exactly(stream, 8)
        if extended is None:
            return None
        (length,) = struct.unpack("!Q", extended)
    if opcode not in DATA_OPCODES and (length > _MAX_CONTROL_BYTES or not first & 0x80):
        raise FrameError(CLOSE_PROTOCOL_ERROR, "a control frame must be whole and at most 125 bytes")
    if length > limit:
        raise FrameError(CLOSE_TOO_BIG, f"a frame of {length} bytes is over the limit of {limit} bytes")
    mask = _read_exactly(stream, 4)
    payload = _read_exactly(stream, length)
    if mask is None or payload is None:
        return None
    return Frame(opcode, unmask(payload, mask))


def unmask(payload: bytes, mask: bytes) -> bytes:
    """XOR with the 4-byte mask, repeated (§5.3), done on whole integers rather than byte by byte."""
    if not payload:
        return payload
    repeated = (mask * (len(payload) // 4 + 1))[: len(payload)]
    value = int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")
    return value.to_bytes(len(payload), "big")


def encode_frame(opcode: Opcode, payload: bytes = b"") -> bytes:
    """One whole, unmasked frame (a server's frames are never masked)."""
    length = len(payload)
    if length < 126:
        head = struct.pack("!BB", 0x80 | opcode, length)
    elif length < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, length)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, length)
    return head + payload


def close_payload(code: int, reason: str = "") -> bytes:
    return struct.pack("!H", code) + reason.encode()[: _MAX_CONTROL_BYTES - 2]
