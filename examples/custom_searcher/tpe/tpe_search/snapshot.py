"""A search as the contract's snapshot (JSON bytes the master stores and hands back) and back.

The state holds the spec, the sequence number, the generator's draw count, the shutdown flag and
every trial in the order it was asked: request id, Optuna number and parameters, trial seed, status
(`running` ones are the pending asks), value, whether it counts against max_trials, and what the
master said of it. That is enough to rebuild the Optuna study trial by trial (search.py explains why
the rebuilt study suggests what the original would).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidArgument
from .events import ExitReason
from .search import TPESearch, TrialRecord, TrialStatus
from .spec import SearchSpec

METHOD = "tpe"
VERSION = 1


@dataclass(frozen=True)
class Snapshot:
    seq: int
    state: bytes
    method: str = METHOD
    version: int = VERSION


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


def encode(search: TPESearch, seq: int) -> Snapshot:
    state = {
        "spec": search.spec.to_json(),
        "seq": seq,
        "draws": search.draws,
        "shutdown": search.shutdown,
        "trials": [_trial_state(t) for t in search.trials],
    }
    return Snapshot(seq=seq, state=json.dumps(state, sort_keys=True, separators=(",", ":")).encode())


# --- reading back, refusing anything this searcher could not have written ---------------------------


def _int(raw: Mapping[str, Any], key: str, path: str, minimum: int = 0) -> int:
    value = raw.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidArgument(f"{path}.{key}: must be an integer >= {minimum}, got {value!r}")
    return value


def _bool(raw: Mapping[str, Any], key: str, path: str) -> bool:
    value = raw.get(key)
    if not isinstance(value, bool):
        raise InvalidArgument(f"{path}.{key}: must be true or false, got {value!r}")
    return value


def _read_trial(raw: Any, number: int, search: TPESearch, path: str) -> TrialRecord:
    if not isinstance(raw, Mapping):
        raise InvalidArgument(f"{path}: must be a mapping")
    request_id = raw.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        raise InvalidArgument(f"{path}.request_id: must be a non-empty string")
    if _int(raw, "number", path) != number:
        raise InvalidArgument(f"{path}.number: trials must be listed in the order they were asked")
    params = raw.get("params")
    if not isinstance(params, Mapping):
        raise InvalidArgument(f"{path}.params: must be a mapping")
    search.space.check_params(params, f"{path}.params")
    try:
        status = TrialStatus(raw.get("status"))
        reason = None if raw.get("exit_reason") is None else ExitReason(raw.get("exit_reason"))
    except ValueError as exc:
        raise InvalidArgument(f"{path}: {exc}")
    value = raw.get("value")
    if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value)):
        raise InvalidArgument(f"{path}.value: must be a finite number or null, got {value!r}")
    if status is TrialStatus.COMPLETE and value is None:
        raise InvalidArgument(f"{path}.value: a complete trial must have one")
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


def decode(snapshot: Snapshot) -> TPESearch:
    """The search a snapshot holds; InvalidArgument naming the field when it cannot be one."""
    if snapshot.method != METHOD or snapshot.version != VERSION:
        raise InvalidArgument(
            f"snapshot: this searcher reads method '{METHOD}' version {VERSION}, "
            f"got '{snapshot.method}' version {snapshot.version}"
        )
    try:
        state = json.loads(snapshot.state)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"snapshot.state: not JSON ({exc})")
    if not isinstance(state, Mapping):
        raise InvalidArgument("snapshot.state: must be a JSON object")
    if state.get("seq") != snapshot.seq:
        raise InvalidArgument(f"snapshot.seq: {snapshot.seq} but the state was taken at {state.get('seq')!r}")
    search = TPESearch(SearchSpec.from_json(state.get("spec"), "snapshot.state.spec"))
    trials = state.get("trials")
    if not isinstance(trials, list):
        raise InvalidArgument("snapshot.state.trials: must be a list")
    records = [
        _read_trial(raw, number, search, f"snapshot.state.trials[{number}]")
        for number, raw in enumerate(trials)
    ]
    if len({r.request_id for r in records}) != len(records):
        raise InvalidArgument("snapshot.state.trials: request ids repeat")
    draws = _int(state, "draws", "snapshot.state")
    if draws < len(records):
        raise InvalidArgument(f"snapshot.state.draws: {draws} is fewer than the {len(records)} trials")
    search.load(draws, records, _bool(state, "shutdown", "snapshot.state"))
    return search
