"""TensorBoard event files with scalars, written without TensorFlow, PyTorch or the tensorboard
package, so the Core API writes them in any training environment.

An event file is a TFRecord stream of `Event` protocol buffers. Each record is
    uint64 length | uint32 masked crc32c(length) | data | uint32 masked crc32c(data)
(little-endian). The first event carries the file version; every other one a `Summary` with
scalar values. Only the few protobuf fields TensorBoard's scalar plugin reads are encoded:
Event{wall_time=1 double, step=2 int64, file_version=3 string, summary=5}, Summary{value=1},
Summary.Value{tag=1 string, simple_value=2 float}.
"""

from __future__ import annotations

import functools
import os
import socket
import struct
import time
from pathlib import Path

FILE_VERSION = "brain.Event:2"
# TensorBoard finds event files by this part of their name.
EVENT_FILE_MARKER = "tfevents"
# Scalars kept in memory before they are written (a few hundred KB at most).
FLUSH_RECORDS = 4096


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def _crc32c_python(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:
    # google-crc32c's C implementation, where the environment has it (Determined's package pulls it
    # in, so the default task environment and image do): a record's checksums cost ~1 us, not ~10.
    import google_crc32c as _google_crc32c  # type: ignore[import-not-found,unused-ignore]

    _crc32c_c = _google_crc32c.value if _google_crc32c.implementation == "c" else None
except ImportError:  # pragma: no cover - depends on the environment
    _crc32c_c = None


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum TFRecord uses."""
    if _crc32c_c is not None:
        return int(_crc32c_c(data))
    return _crc32c_python(data)


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    """One TFRecord holding `data`."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # int64 on the wire: negatives as two's complement
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _length_delimited(field_number: int, payload: bytes) -> bytes:
    return _varint(field_number << 3 | 2) + _varint(len(payload)) + payload


def _event_header(wall_time: float, step: int) -> bytes:
    return b"\x09" + struct.pack("<d", wall_time) + b"\x10" + _varint(step)


def version_event(wall_time: float) -> bytes:
    return _event_header(wall_time, 0) + _length_delimited(3, FILE_VERSION.encode())


_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")


@functools.lru_cache(maxsize=4096)
def _scalar_tail(tag: str) -> bytes:
    """What a scalar event of `tag` holds after its step, up to the value: the same bytes for every
    event of the tag (the summary's field header and lengths, the tag, the value's field tag)."""
    summary_value_head = _length_delimited(1, tag.encode()) + b"\x15"
    summary_value_length = len(summary_value_head) + 4  # + the 32-bit float
    summary_length = 1 + len(_varint(summary_value_length)) + summary_value_length
    return (
        _varint(5 << 3 | 2)
        + _varint(summary_length)
        + b"\x0a"
        + _varint(summary_value_length)
        + summary_value_head
    )


def scalar_event(tag: str, value: float, step: int, wall_time: float) -> bytes:
    """An Event with one scalar (TensorBoard's simple_value, a 32-bit float)."""
    step_bytes = bytes((step,)) if 0 <= step < 0x80 else _varint(step)
    return b"\x09" + _DOUBLE.pack(wall_time) + b"\x10" + step_bytes + _scalar_tail(tag) + _FLOAT.pack(value)


def is_scalar(value: object) -> bool:
    """Whether TensorBoard can plot `value`: a real number (NaN and infinities included), not a
    bool, a string or a collection."""
    return isinstance(value, int | float) and not isinstance(value, bool)


class ScalarEventWriter:
    """Appends scalars to event files in `directory`. `roll()` closes the current file, so that a
    file never changes once uploaded; the next scalar starts a new one. File names sort by the
    time they were started, the order TensorBoard reads a run's files in."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._file: Path | None = None
        self._sequence = 0
        # (tag, value, step, wall time) of scalars not yet written: encoded together at a flush,
        # so adding one costs an append (a training loop may report every step).
        self._pending: list[tuple[str, float, int, float]] = []

    @property
    def current_file(self) -> Path | None:
        return self._file

    def _new_file(self) -> Path:
        self._sequence += 1
        name = (
            f"events.out.{EVENT_FILE_MARKER}.{int(time.time()):010d}.{socket.gethostname()}"
            f".{os.getpid()}.{self._sequence:06d}"
        )
        self._directory.mkdir(parents=True, exist_ok=True)
        path = self._directory / name
        with open(path, "xb") as f:
            f.write(record(version_event(time.time())))
        return path

    def add_scalar(self, tag: str, value: float, step: int, wall_time: float | None = None) -> None:
        self._pending.append((tag, float(value), int(step), time.time() if wall_time is None else wall_time))
        if len(self._pending) >= FLUSH_RECORDS:
            self.flush()

    def flush(self) -> None:
        """Write what was added since the last flush. Callers need not flush after each scalar:
        files are read once rolled (uploaded), and a full buffer flushes itself."""
        if not self._pending:
            return
        if self._file is None:
            self._file = self._new_file()
        with open(self._file, "ab") as f:
            f.write(_records(self._pending))
        self._pending.clear()

    def roll(self) -> None:
        """Flush and close the current file; the next flush writes a new one."""
        self.flush()
        self._file = None


_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")


def _records(scalars: list[tuple[str, float, int, float]]) -> bytes:
    """The TFRecords of scalar events, in one tight loop (what record(scalar_event(...)) gives
    for each)."""
    out: list[bytes] = []
    append = out.append
    for tag, value, step, wall_time in scalars:
        data = (
            b"\x09"
            + _DOUBLE.pack(wall_time)
            + b"\x10"
            + (bytes((step,)) if 0 <= step < 0x80 else _varint(step))
            + _scalar_tail(tag)
            + _FLOAT.pack(value)
        )
        length = _LENGTH.pack(len(data))
        append(length)
        append(_CRC.pack(masked_crc32c(length)))
        append(data)
        append(_CRC.pack(masked_crc32c(data)))
    return b"".join(out)
