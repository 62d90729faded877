"""TensorBoard event files with scalars, written without TensorFlow, PyTorch or the tensorboard
package, so the Core API writes them in any training environment.

An event file is a TFRecord stream of `Event` protocol buffers. Each record is
    uint64 length | uint32 masked crc32c(length) | data | uint32 masked crc32c(data)
(little-endian). The first event carries the file version; every other one a `Summary` with
the scalar values of one step (one event per report, not per scalar: TensorBoard reads every
value of an event's summary, and one record's framing and checksums cost more than its values).
Only the few protobuf fields TensorBoard's scalar plugin reads are encoded:
Event{wall_time=1 double, step=2 int64, file_version=3 string, summary=5}, Summary{value=1},
Summary.Value{tag=1 string, simple_value=2 float}.
"""

from __future__ import annotations

import functools
import math
import os
import socket
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
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
    # Steps are mostly below 2**21: one to three bytes without a loop.
    if 0 <= value < 0x80:
        return bytes((value,))
    if 0 <= value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    if 0 <= value < 0x200000:
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, value >> 14))
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
# A step not yet written: (step, wall time, values by name, tag of a name, names left out).
PendingStep = tuple[int, float, Mapping[str, object], Callable[[str], str], AbstractSet[str]]


@functools.lru_cache(maxsize=4096)
def _value_head(tag: str) -> bytes:
    """A Summary.Value of `tag` up to its float: the summary's field header and the value's length,
    the tag, the float's field tag (the same bytes for every value of the tag)."""
    inner = _length_delimited(1, tag.encode()) + b"\x15"
    return b"\x0a" + _varint(len(inner) + 4) + inner


def _float32(value: float) -> bytes:
    try:
        return _FLOAT.pack(value)
    except (OverflowError, struct.error):  # beyond a 32-bit float (or a huge int): a float32 cast's inf
        return _FLOAT.pack(math.inf if value > 0 else -math.inf)


def scalars_event(scalars: Sequence[tuple[str, float]], step: int, wall_time: float) -> bytes:
    """An Event at `step` whose summary holds `scalars` (tag, value) as TensorBoard's simple_value,
    a 32-bit float each."""
    values = b"".join(_value_head(tag) + _float32(value) for tag, value in scalars)
    return b"\x09" + _DOUBLE.pack(wall_time) + b"\x10" + _varint(step) + _length_delimited(5, values)


def scalar_event(tag: str, value: float, step: int, wall_time: float) -> bytes:
    """An Event with one scalar."""
    return scalars_event([(tag, value)], step, wall_time)


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
        # Steps not yet written: encoded together at a flush, so adding one costs an append (a
        # training loop may report every step); what to plot, and under which tag, is sorted out
        # there too.
        self._pending: list[PendingStep] = []

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
        self.add_step(int(step), time.time() if wall_time is None else wall_time, {tag: value})

    def add_step(
        self,
        step: int,
        wall_time: float,
        values: Mapping[str, object],
        tag_of: Callable[[str], str] = str,
        skip: AbstractSet[str] = frozenset(),
    ) -> None:
        """One event at `step`: the values of `values` TensorBoard can plot (is_scalar), each under
        the tag `tag_of(name)`, less the names in `skip`. `values` is kept until the flush, not
        copied: the caller must not change it."""
        self._pending.append((step, wall_time, values, tag_of, skip))
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


@functools.lru_cache(maxsize=4096)
def _length_header(length: int) -> bytes:
    """A record's length and its masked checksum (events of one report shape share a length)."""
    packed = _LENGTH.pack(length)
    return packed + _CRC.pack(masked_crc32c(packed))


# Per (tag function, names of a step): the value heads of those names, made once.
_heads: dict[tuple[Callable[[str], str], tuple[str, ...]], tuple[bytes, ...]] = {}


def _values(values: Mapping[str, object], tag_of: Callable[[str], str], skip: AbstractSet[str]) -> bytes:
    """The Summary.Values of a step's plottable values."""
    if skip:
        return b"".join(
            [
                _value_head(tag_of(name)) + _float32(value)  # type: ignore[arg-type]
                for name, value in values.items()
                if name not in skip and is_scalar(value)
            ]
        )
    key = (tag_of, tuple(values))
    heads = _heads.get(key)
    if heads is None:
        if len(_heads) >= 4096:
            _heads.clear()
        heads = _heads[key] = tuple(_value_head(tag_of(name)) for name in key[1])
    parts: list[bytes] = []
    for head, value in zip(heads, values.values(), strict=True):
        if type(value) is float:  # the common case, without is_scalar's checks
            parts.append(head)
            try:
                parts.append(_FLOAT.pack(value))
            except OverflowError:
                parts.append(_float32(value))
        elif is_scalar(value):
            parts.append(head)
            parts.append(_float32(value))  # type: ignore[arg-type]
    return b"".join(parts)


def _records(steps: list[PendingStep]) -> bytes:
    """The TFRecords of the pending steps' events, in one tight loop (what
    record(scalars_event(...)) gives for each; a step with nothing to plot writes nothing)."""
    out: list[bytes] = []
    append = out.append
    crc = _crc32c_c or crc32c
    for step, wall_time, values, tag_of, skip in steps:
        body = _values(values, tag_of, skip)
        if not body:
            continue
        data = b"".join(
            (b"\x09", _DOUBLE.pack(wall_time), b"\x10", _varint(step), b"\x2a", _varint(len(body)), body)
        )
        append(_length_header(len(data)))
        append(data)
        check = crc(data)
        append(_CRC.pack((((check >> 15) | (check << 17)) + 0xA282EAD8) & 0xFFFFFFFF))
    return b"".join(out)
