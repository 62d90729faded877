"""What NVML hands back, made plain for the agent's GPU modules (slots, health, memory, topology).

pynvml returns strings as bytes or str depending on its version, and raises NVMLError subclasses
whose `value` is NVML's return code; the codes named here are the ones the agent acts on
(nvml.h's nvmlReturn_t)."""

from __future__ import annotations

NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15


def text(value: str | bytes) -> str:
    """An NVML string as text, whichever pynvml returned it."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def error_code(exc: BaseException) -> int | None:
    """The NVML return code an NVMLError carries; None for any other exception."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None
