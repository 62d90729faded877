"""Learning curves of an experiment's best trials for charts (Determined's TrialsSample).

Reading every report of a thousand trials on each refresh would not stay fluid, so each
(experiment, group, metric) keeps its points in memory and a refresh reads only reports stored
since the last ones it has read for good (metrics ids only grow). Archived reports (an older run
past the checkpoint a restart resumed from) are left out, so a refresh after a restart rebuilds that
trial's series.

On PostgreSQL a report's id is taken at its INSERT, and training reports of different trials are
stored side by side (a lock per trial): a refresh can see a later id committed while an earlier
one is still on its way. It once went on from the highest id it read, and the earlier report was
never charted. Now it goes on from what metric_inserts.py says was read for good, reading a few
reports twice (a point is keyed by its trial and steps, so that changes nothing).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select

from services.master.domain.config import config_view
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import InvalidArgument, NotFound
from services.master.domain.kernel.metric_inserts import ReadStart
from services.master.domain.kernel.states import TERMINAL
from services.master.domain.metrics.downsample import downsample_by
from services.master.store import models

MAX_CACHED_SERIES_SETS = 32


@dataclass(frozen=True)
class Point:
    batches: int
    value: float
    time: datetime


@dataclass
class TrialSeries:
    trial_id: int
    hparams: dict[str, Any]
    points: list[Point]


@dataclass
class _SeriesSet:
    # Every report up to this id has been read, for good.
    settled_id: int = 0
    archived_seen: int = 0
    points: dict[int, dict[int, Point]] = field(default_factory=dict)  # trial → steps → point
    lock: threading.Lock = field(default_factory=threading.Lock)


def _metric_value(dialect: str, name: str) -> ColumnElement[Any]:
    """One metric out of the report's JSON, as the database stores it (a generic JSON index would
    round-trip the number through JSON text, which SQLite prints with 15 digits)."""
    if dialect == "postgresql":
        return models.Metric.metrics[name].as_string()
    path = '$."' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return func.json_extract(models.Metric.metrics, path)


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)  # PostgreSQL hands numbers over as text; NaN/Infinity are stored so
        except ValueError:
            return None
    return None


class SampleCache:
    def __init__(self, ctx: MasterContext) -> None:
        self._ctx = ctx
        self._sets: OrderedDict[tuple[int, str, str], _SeriesSet] = OrderedDict()
        self._lock = threading.Lock()

    def _set(self, key: tuple[int, str, str]) -> _SeriesSet:
        with self._lock:
            found = self._sets.get(key)
            if found is None:
                found = self._sets[key] = _SeriesSet()
                while len(self._sets) > MAX_CACHED_SERIES_SETS:
                    self._sets.popitem(last=False)
            self._sets.move_to_end(key)
            return found

    def _refresh(self, series: _SeriesSet, experiment_id: int, group: str, metric: str) -> None:
        started = self._ctx.metric_inserts.read_start()
        with self._ctx.db.read() as s:
            trial_ids = select(models.Trial.id).where(models.Trial.experiment_id == experiment_id)
            archived = s.scalar(
                select(models.Metric.id)
                .where(
                    models.Metric.trial_id.in_(trial_ids),
                    models.Metric.group_name == group,
                    models.Metric.archived.is_(True),
                )
                .order_by(models.Metric.id.desc())
                .limit(1)
            )
            if (archived or 0) != series.archived_seen:
                # Reports were archived since the last read: start this set over.
                series.points.clear()
                series.settled_id = 0
                series.archived_seen = archived or 0
            rows = s.execute(
                select(
                    models.Metric.id,
                    models.Metric.trial_id,
                    models.Metric.steps_completed,
                    models.Metric.report_time,
                    _metric_value(self._ctx.db.dialect, metric),
                )
                .where(
                    models.Metric.trial_id.in_(trial_ids),
                    models.Metric.group_name == group,
                    models.Metric.archived.is_(False),
                    models.Metric.id > series.settled_id,
                )
                .order_by(models.Metric.id)
            ).all()
        highest = series.settled_id
        for metric_id, trial_id, steps, report_time, raw in rows:
            highest = max(highest, metric_id)
            value = _as_float(raw)
            if value is None:
                continue
            series.points.setdefault(trial_id, {})[int(steps)] = Point(int(steps), value, report_time)
        self._settle(series, started, highest)

    def _settle(self, series: _SeriesSet, started: ReadStart, highest: int) -> None:
        if self._ctx.db.dialect != "postgresql":
            series.settled_id = highest  # one writer at a time: ids become visible in order
            return
        series.settled_id = max(series.settled_id, self._ctx.metric_inserts.read_for_good(started, highest))

    def sample(
        self,
        experiment_id: int,
        *,
        metric_name: str,
        group: str,
        max_trials: int,
        max_datapoints: int,
        start_batches: int,
        end_batches: int,
    ) -> tuple[list[TrialSeries], bool]:
        """(the best trials' downsampled series, whether the experiment has ended)."""
        if max_trials < 0 or max_datapoints < 0:
            raise InvalidArgument("max_trials, max_datapoints: must be >= 0")
        with self._ctx.db.read() as s:
            exp = s.get(models.Experiment, experiment_id)
            if exp is None:
                raise NotFound(f"experiment {experiment_id} not found")
            metric = metric_name or str(config_view(exp.config).searcher_metric or "")
            if not metric:
                raise InvalidArgument("metric_name: required (the experiment has no searcher metric)")
            smaller = config_view(exp.config).smaller_is_better
            trials = list(
                s.execute(
                    select(models.Trial.id, models.Trial.hparams, models.Trial.searcher_metric_value).where(
                        models.Trial.experiment_id == experiment_id
                    )
                )
            )
            ended = exp.state in TERMINAL
        group = group or "validation"
        series = self._set((experiment_id, group, metric))
        with series.lock:
            self._refresh(series, experiment_id, group, metric)
            by_trial = {trial_id: dict(points) for trial_id, points in series.points.items()}

        def rank(row: Any) -> tuple[bool, float, int]:
            value = row[2]
            if value is None:
                return (True, 0.0, row[0])
            return (False, value if smaller else -value, row[0])

        chosen = sorted(trials, key=rank)[: max_trials or 100]
        limit = max_datapoints or 1000
        result = []
        for trial_id, hparams, _ in chosen:
            points = [
                p
                for steps, p in sorted(by_trial.get(trial_id, {}).items())
                if steps >= start_batches and (end_batches <= 0 or steps <= end_batches)
            ]
            points = downsample_by(
                points,
                limit,
                x=lambda p: float(p.batches),
                y=lambda p: p.value if math.isfinite(p.value) else 0.0,
            )
            result.append(TrialSeries(trial_id=trial_id, hparams=hparams, points=points))
        return result, ended
