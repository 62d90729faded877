"""Downsampling of metric series for charts: keep the shape, cap the points.

Largest-Triangle-Three-Buckets keeps the peaks and dips that a stride would drop; the first and
last points are always kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar


class _Report(Protocol):
    @property
    def steps_completed(self) -> int: ...
    @property
    def metrics(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=_Report)
P = TypeVar("P")


def _finite(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 0.0


def downsample(points: Sequence[R], limit: int) -> list[R]:
    """Metric reports, shaped by their first numeric metric."""
    if not points:
        return []
    name = next(
        (k for k, v in points[0].metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)),
        None,
    )
    return downsample_by(
        points,
        limit,
        x=lambda p: float(p.steps_completed),
        y=lambda p: _finite(p.metrics.get(name)) if name else 0.0,
    )


def downsample_by(
    points: Sequence[P], limit: int, *, x: Callable[[P], float], y: Callable[[P], float]
) -> list[P]:
    """Any series, given its x and y (points in x order)."""
    if limit <= 0 or len(points) <= limit:
        return list(points)
    if limit < 3:
        return [points[0], points[-1]][:limit]
    result = [points[0]]
    bucket = (len(points) - 2) / (limit - 2)
    previous = points[0]
    for i in range(limit - 2):
        start = math.floor(i * bucket) + 1
        end = math.floor((i + 1) * bucket) + 1
        following = points[end : min(math.floor((i + 2) * bucket) + 1, len(points))] or [points[-1]]
        avg_x = sum(x(p) for p in following) / len(following)
        avg_y = sum(y(p) for p in following) / len(following)
        px, py = x(previous), y(previous)
        best, best_area = points[start], -1.0
        for candidate in points[start:end]:
            area = abs((px - avg_x) * (y(candidate) - py) - (px - x(candidate)) * (avg_y - py))
            if area > best_area:
                best, best_area = candidate, area
        result.append(best)
        previous = best
    result.append(points[-1])
    return result
