"""A TPE search's state as snapshot bytes (JSON the master stores and hands back), and back.

The state holds the spec, the number of events applied (`seq`), the generator's draw count, the
shutdown flag and every trial in the order it was asked: request id, Optuna number and parameters,
trial seed, status (`running` ones are the pending asks), value, whether it counts against
max_trials, and what the master said of it. That is enough to rebuild the Optuna study trial by
trial (search.py explains why the rebuilt study suggests what the original would).
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.searcher_plugin import ExitReason, InvalidSnapshot, SearchSpec, Snapshot, canonical_json

METHOD = "tpe"
VERSION = 1


class TrialStatus(enum.Enum):
    RUNNING = "running"  # asked and not told: a pending ask
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass
class TrialRecord:
    request_id: str
    number: int  # the trial's number in the Optuna study
    params: dict[str, Any]  # Optuna's parameters, by dotted name
    trial_seed: int
    status: TrialStatus = TrialStatus.RUNNING
    value: float | None = None
    # Counts against max_trials (a trial with invalid hyperparameters does not).
    counts: bool = True
    created: bool = False
    exited: bool = False
    exit_reason: ExitReason | None = None


@dataclass
class SearchState:
    spec: SearchSpec
    seq: int
    draws: int
    shutdown: bool
    trials: list[TrialRecord]


def _trial_state(record: TrialRecord) -> dict[str, Any]:
    return {
        "request_id": record.request_id,
        "number": record.number,
        "params": record.params,
        "trial_seed": record.trial_seed,
        "status": record.status.value,
        "value": record.value,
        "counts": record.counts,
        "created": record.created,
        "exited": record.exited,
        "exit_reason": record.exit_reason.value if record.exit_reason else None,
    }


def encode(state: SearchState) -> bytes:
    return canonical_json(
        {
            "spec": state.spec.to_json(),
            "seq": state.seq,
            "draws": state.draws,
            "shutdown": state.shutdown,
            "trials": [_trial_state(t) for t in state.trials],
        }
    )


# --- reading back, refusing anything this searcher could not have written ---------------------------


def _int(raw: Mapping[str, Any], key: str, path: str, minimum: int = 0) -> int:
    value = raw.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidSnapshot(f"{path}.{key}: must be an integer >= {minimum}, got {value!r}")
    return value


def _bool(raw: Mapping[str, Any], key: str, path: str) -> bool:
    value = raw.get(key)
    if not isinstance(value, bool):
        raise InvalidSnapshot(f"{path}.{key}: must be true or false, got {value!r}")
    return value


def _read_trial(raw: Any, number: int, path: str) -> TrialRecord:
    if not isinstance(raw, Mapping):
        raise InvalidSnapshot(f"{path}: must be a mapping")
    request_id = raw.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        raise InvalidSnapshot(f"{path}.request_id: must be a non-empty string")
    if _int(raw, "number", path) != number:
        raise InvalidSnapshot(f"{path}.number: trials must be listed in the order they were asked")
    params = raw.get("params")
    if not isinstance(params, Mapping):
        raise InvalidSnapshot(f"{path}.params: must be a mapping")
    try:
        status = TrialStatus(raw.get("status"))
        reason = None if raw.get("exit_reason") is None else ExitReason(raw.get("exit_reason"))
    except ValueError as exc:
        raise InvalidSnapshot(f"{path}: {exc}")
    value = raw.get("value")
    if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value)):
        raise InvalidSnapshot(f"{path}.value: must be a finite number or null, got {value!r}")
    if status is TrialStatus.COMPLETE and value is None:
        raise InvalidSnapshot(f"{path}.value: a complete trial must have one")
    return TrialRecord(
        request_id=request_id,
        number=number,
        params=dict(params),
        trial_seed=_int(raw, "trial_seed", path),
        status=status,
        value=None if value is None else float(value),
        counts=_bool(raw, "counts", path),
        created=_bool(raw, "created", path),
        exited=_bool(raw, "exited", path),
        exit_reason=reason,
    )


def decode(snapshot: Snapshot) -> SearchState:
    """The state a snapshot holds (its format version the kit checked already); InvalidSnapshot
    naming the field when this searcher could not have written it. The trials' parameters are
    checked against the spec's space by the search that takes them."""
    if snapshot.method != METHOD:
        raise InvalidSnapshot(
            f"snapshot.method: this searcher reads method '{METHOD}', got '{snapshot.method}'"
        )
    try:
        raw = json.loads(snapshot.state)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidSnapshot(f"snapshot.state: not JSON ({exc})")
    if not isinstance(raw, Mapping):
        raise InvalidSnapshot("snapshot.state: must be a JSON object")
    if raw.get("seq") != snapshot.seq:
        raise InvalidSnapshot(f"snapshot.seq: {snapshot.seq} but the state was taken at {raw.get('seq')!r}")
    trials = raw.get("trials")
    if not isinstance(trials, list):
        raise InvalidSnapshot("snapshot.state.trials: must be a list")
    records = [
        _read_trial(item, number, f"snapshot.state.trials[{number}]") for number, item in enumerate(trials)
    ]
    if len({r.request_id for r in records}) != len(records):
        raise InvalidSnapshot("snapshot.state.trials: request ids repeat")
    draws = _int(raw, "draws", "snapshot.state")
    if draws < len(records):
        raise InvalidSnapshot(f"snapshot.state.draws: {draws} is fewer than the {len(records)} trials")
    return SearchState(
        spec=SearchSpec.from_json(raw.get("spec"), "snapshot.state.spec"),
        seq=snapshot.seq,
        draws=draws,
        shutdown=_bool(raw, "shutdown", "snapshot.state"),
        trials=records,
    )
