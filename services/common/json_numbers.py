"""Numbers in JSON as Determined's gateway (Go's protojson) writes them, for every Cairn edge that
writes them (the REST gateway's marshaler, the metrics routes): NaN and infinities as the strings
"NaN", "Infinity", "-Infinity" (JSON has no such numbers, and a diverging loss must not turn a read
into an error), and a whole number held in a Struct/Value as an integer."""

from __future__ import annotations

import math

# Beyond this a double no longer holds every integer exactly; Go switches to exponent form at 1e21.
_LARGEST_PRINTED_AS_INTEGER = 1e21


def json_double(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def struct_number(value: float) -> float | int | str:
    """A number held in a Struct/Value as printed (see gateway/json_encoding.py): whole ones as
    integers, NaN and infinities as strings. Also what metrics_json writes."""
    if not math.isfinite(value):
        return json_double(value)
    if value.is_integer() and abs(value) < _LARGEST_PRINTED_AS_INTEGER:
        return int(value)
    return value
