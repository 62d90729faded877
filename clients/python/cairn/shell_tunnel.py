"""`cairn shell open`'s ssh ProxyCommand (`python -m cairn.shell_tunnel HOST PORT SHELL_ID [--tls]`):
ssh's stdin and stdout carried to a shell's SSH server over a websocket to the master's proxy at
/proxy/{shell_id}/, the same tunnel Determined's `determined.cli.tunnel` opens. The user's session
token comes in $CAIRN_SHELL_TOKEN (never on a command line, where `ps` shows it), and TLS is
verified against $CAIRN_MASTER_CERT as the CLI's own calls are."""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import os
import socket
import ssl
import struct
import sys
import threading
from typing import BinaryIO

from cairn.tls import ca_from_environment

TOKEN_ENV = "CAIRN_SHELL_TOKEN"
CHUNK_BYTES = 64 * 1024
# A server frame over this ends the tunnel (the master sends at most 64 KiB at a time).
MAX_FRAME_BYTES = 4 * 1024 * 1024
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_BINARY, _CLOSE, _PING, _PONG = 0x2, 0x8, 0x9, 0xA


class TunnelError(Exception):
    pass


def encode_client_frame(opcode: int, payload: bytes, mask: bytes) -> bytes:
    """One whole frame, masked as a client's must be (RFC 6455 §5.3)."""
    length = len(payload)
    if length < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
    elif length < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
    repeated = (mask * (length // 4 + 1))[:length]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(length, "big")
    return head + mask + (masked if length else b"")


def read_server_frame(stream: BinaryIO) -> tuple[int, bytes] | None:
    """(opcode, payload) of the server's next frame; None at the connection's end."""
    head = stream.read(2)
    if len(head) < 2:
        return None
    opcode, length = head[0] & 0x0F, head[1] & 0x7F
    if length == 126:
        (length,) = struct.unpack("!H", stream.read(2))
    elif length == 127:
        (length,) = struct.unpack("!Q", stream.read(8))
    if length > MAX_FRAME_BYTES:
        raise TunnelError(f"the master sent a frame of {length} bytes")
    payload = stream.read(length)
    if len(payload) < length:
        return None
    return opcode, payload


def connect(host: str, port: int, shell_id: str, token: str | None, tls: bool) -> socket.socket:
    """A socket past the websocket handshake with the master's proxy for `shell_id`."""
    sock: socket.socket = socket.create_connection((host, port), timeout=30)
    if tls:
        context = ssl.create_default_context()
        ca = ca_from_environment()
        if ca:
            context.load_verify_locations(cadata=ca.decode())
        sock = context.wrap_socket(sock, server_hostname=host)
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET /proxy/{shell_id}/ HTTP/1.1",
        f"Host: {host}:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(1)  # byte by byte: nothing past the handshake may be consumed here
        if not data or len(head) > 64 * 1024:
            raise TunnelError(f"the master closed the connection during the handshake: {head!r}")
        head += data
    status, _, rest = head.decode("latin-1").partition("\r\n")
    if " 101 " not in status + " ":
        raise TunnelError(f"the master refused the tunnel: {status.strip()} {rest.strip()}")
    expected = base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()
    if expected.lower() not in rest.lower():
        raise TunnelError("the master's handshake answer does not match the key sent")
    sock.settimeout(None)
    return sock


def relay(sock: socket.socket, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """stdin to the tunnel and the tunnel to stdout until either ends."""
    lock = threading.Lock()

    def send(opcode: int, payload: bytes) -> None:
        with lock:
            sock.sendall(encode_client_frame(opcode, payload, os.urandom(4)))

    def upload() -> None:
        with contextlib.suppress(OSError):
            while data := stdin.read(CHUNK_BYTES):
                send(_BINARY, data)
            send(_CLOSE, struct.pack("!H", 1000))

    threading.Thread(target=upload, daemon=True).start()
    reader = sock.makefile("rb")
    with contextlib.suppress(OSError):
        while (frame := read_server_frame(reader)) is not None:
            opcode, payload = frame
            if opcode == _CLOSE:
                break
            if opcode == _PING:
                send(_PONG, payload)
            elif opcode != _PONG:
                stdout.write(payload)
                stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description="Tunnel ssh to a Cairn shell through the master")
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("shell_id")
    parser.add_argument("--tls", action="store_true")
    args = parser.parse_args()
    try:
        sock = connect(args.host, args.port, args.shell_id, os.environ.get(TOKEN_ENV), args.tls)
    except (OSError, TunnelError) as exc:
        print(f"cairn shell tunnel: {exc}", file=sys.stderr)
        return 1
    stdin = os.fdopen(sys.stdin.fileno(), "rb", buffering=0)
    # Unbuffered in: each read returns what ssh has written so far. Buffered out: whole writes.
    relay(sock, stdin, sys.stdout.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
