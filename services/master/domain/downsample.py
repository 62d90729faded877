"""Downsampling of metric series for charts: keep the shape, cap the points.

Largest-Triangle-Three-Buckets on the series' first numeric metric keeps peaks and dips that a
stride would drop; the first and last points are always kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar


class _Point(Protocol):
    steps_completed: int
    metrics: dict[str, Any]


P = TypeVar("P", bound=_Point)


def _value(point: _Point, name: str | None) -> float:
    value = point.metrics.get(name) if name else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 0.0


def downsample(points: Sequence[P], limit: int) -> list[P]:
    if limit <= 0 or len(points) <= limit:
        return list(points)
    if limit < 3:
        return [points[0], points[-1]][:limit]
    name = next(
        (k for k, v in points[0].metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)),
        None,
    )
    result = [points[0]]
    bucket = (len(points) - 2) / (limit - 2)
    previous = points[0]
    for i in range(limit - 2):
        start = math.floor(i * bucket) + 1
        end = math.floor((i + 1) * bucket) + 1
        next_start = end
        next_end = min(math.floor((i + 2) * bucket) + 1, len(points))
        following = points[next_start:next_end] or [points[-1]]
        avg_x = sum(p.steps_completed for p in following) / len(following)
        avg_y = sum(_value(p, name) for p in following) / len(following)
        px, py = previous.steps_completed, _value(previous, name)
        best, best_area = points[start], -1.0
        for candidate in points[start:end]:
            area = abs(
                (px - avg_x) * (_value(candidate, name) - py)
                - (px - candidate.steps_completed) * (avg_y - py)
            )
            if area > best_area:
                best, best_area = candidate, area
        result.append(best)
        previous = best
    result.append(points[-1])
    return result
