"""A GPU's memory health, read from NVML's counters (gpu_health.py reads them every 10 s, and at
once when a failed container's end waits on them): the volatile uncorrected ECC count, which
counts from the GPU's last reset, and row remapping (A100 and later), whose failure or pending
remap means the GPU must be reset before it is trusted again.

Some drivers post no event for every uncorrected error, so the counters are read beside the
event watch. Errors from before the agent started count too: a non-zero volatile count at the
start is an uncorrected error since the GPU's last reset (the agent may have restarted because
of it), which is what NVIDIA's guidance says to act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.agent.nvml_values import NVML_ERROR_NOT_SUPPORTED, error_code
from services.common.logging import get_logger

log = get_logger(__name__)

NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0


@dataclass
class MemoryState:
    """What one GPU's counters said last; None where the GPU cannot say (ECC off, no remapper)."""

    uncorrected: int | None = None
    remap_failed: bool | None = None
    remap_pending: bool | None = None

    @property
    def readable(self) -> bool:
        return self.uncorrected is not None or self.remap_failed is not None


class MemoryWatch:
    """One GPU's counters: `first` reads them at the start, `problems` on every later read."""

    def __init__(self, nvml: Any, slot: str, handle: Any) -> None:
        self._nvml = nvml
        self._slot = slot
        self._handle = handle
        self._last = MemoryState()
        # Errors reading the counters are logged once, not at every read of a GPU that is gone.
        self._warned: set[str] = set()

    def _read(self) -> MemoryState:
        state = MemoryState()
        try:
            state.uncorrected = int(
                self._nvml.nvmlDeviceGetTotalEccErrors(
                    self._handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC
                )
            )
        except Exception as exc:
            self._unreadable("ECC count", exc)
        try:
            _corrected, _uncorrected, pending, failed = self._nvml.nvmlDeviceGetRemappedRows(self._handle)
            state.remap_pending, state.remap_failed = bool(pending), bool(failed)
        except Exception as exc:
            self._unreadable("row remapping", exc)
        return state

    def _unreadable(self, what: str, exc: BaseException) -> None:
        # ECC off, or a GPU without a row remapper (before A100): nothing to read, nothing to say.
        if error_code(exc) != NVML_ERROR_NOT_SUPPORTED and what not in self._warned:
            self._warned.add(what)
            log.warning("cannot read a GPU's memory health", slot_id=self._slot, what=what, error=str(exc))

    def first(self) -> list[str]:
        """Read the counters at the agent's start: what is already wrong."""
        self._last = state = self._read()
        problems = []
        if state.uncorrected:
            problems.append(f"uncorrected ECC errors since the GPU's last reset: {state.uncorrected}")
        problems.extend(self._remap_problems(state, MemoryState()))
        return problems

    def problems(self) -> list[str]:
        """Read the counters again: what went wrong since the last read."""
        state = self._read()
        before, self._last = self._last, state
        found = []
        if state.uncorrected is not None and before.uncorrected is not None:
            if state.uncorrected > before.uncorrected:
                more = state.uncorrected - before.uncorrected
                found.append(
                    f"uncorrected ECC errors: {more} more ({state.uncorrected} since the last reset)"
                )
            elif state.uncorrected < before.uncorrected:
                log.info("a GPU's ECC count went back: it was reset", slot_id=self._slot)
        found.extend(self._remap_problems(state, before))
        return found

    @property
    def readable(self) -> bool:
        """Whether the GPU has counters to read (a failed container's end waits for a read)."""
        return self._last.readable

    @staticmethod
    def _remap_problems(state: MemoryState, before: MemoryState) -> list[str]:
        found: list[str] = []
        if state.remap_failed and not before.remap_failed:
            found.append("row remapping failed: the GPU's memory cannot be repaired")
        if state.remap_pending and not before.remap_pending:
            found.append("row remapping pending: the GPU needs a reset")
        return found
