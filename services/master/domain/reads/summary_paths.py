"""Determined's names of the columns a trial's summary metrics offer to a filter or a sort:
`<group>.<metric>.<aggregate>` (`validation.validation_loss.last`, `training.loss.mean`,
`inference.accuracy.max`), the group `training` and `validation` standing for the summary's
`avg_metrics` and `validation_metrics`, any other group for itself; the aggregate one of min, max,
mean and last. A name without its aggregate (`validation.validation_loss`, as Cairn's project
columns name a metric) reads the last value."""

from __future__ import annotations

import re

from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.reads.json_values import check_path

AGGREGATES = ("min", "max", "mean", "last")
_GROUP_KEYS = {"training": "avg_metrics", "validation": "validation_metrics"}
# As Determined's metricIDTemplate: the group is up to the first dot, the metric may hold dots.
_QUALIFIED = re.compile(r"^(?P<group>.+?)\.(?P<name>.+)\.(?P<aggregate>min|max|mean|last)$")
_WHAT = "a metric column (<group>.<metric>.<min|max|mean|last>, e.g. validation.validation_loss.last)"


def summary_path(column: str, where: str) -> tuple[str, ...]:
    """The path of `column` in a trial's summary_metrics; InvalidArgument naming `where` and the
    column where it names none."""
    found = _QUALIFIED.match(column)
    if found is not None:
        group, name, aggregate = found.group("group", "name", "aggregate")
    else:
        group, _, name = column.partition(".")
        aggregate = "last"
        if not group or not name:
            raise InvalidArgument(f"{where}: {column!r} is not {_WHAT}")
    return check_path([_GROUP_KEYS.get(group, group), name, aggregate], where, column, _WHAT)
