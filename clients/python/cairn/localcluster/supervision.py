"""When to restart a crashed service of a local cluster, and when to stop trying.

Pure decisions over a service's restart history, so they are tested without processes:
  * a crash is answered by a restart after a delay that doubles with each crash in a row
    (1 s, 2 s, 4 s, ... at most 30 s), so a service that cannot start does not spin;
  * a service that stayed up for a while (STABLE_S) has recovered: its next crash starts the
    backoff from the beginning again;
  * more than MAX_CRASHES crashes within CRASH_WINDOW_S is a crash loop: the watchdog gives up on
    that service and says why (`cairn cluster status` shows it; `cairn cluster up` tries again).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RestartPolicy:
    first_delay_s: float = 1.0
    max_delay_s: float = 30.0
    # Up this long without crashing: the backoff starts over.
    stable_s: float = 60.0
    max_crashes: int = 5
    crash_window_s: float = 300.0


@dataclass(frozen=True)
class Decision:
    # "restart" (after delay_s) or "give up" (with reason).
    action: str
    delay_s: float = 0.0
    reason: str = ""

    @property
    def gives_up(self) -> bool:
        return self.action == "give up"


def crashes_in_a_row(crash_times: Sequence[float], started_at: Sequence[float], policy: RestartPolicy) -> int:
    """How many of the latest crashes followed one another with no stable run between them.

    `crash_times[i]` is when run i ended and `started_at[i]` when it had started; a run that lasted
    at least `stable_s` breaks the streak."""
    streak = 0
    for crashed, started in zip(reversed(crash_times), reversed(started_at), strict=False):
        if crashed - started >= policy.stable_s:
            break
        streak += 1
    return streak


def decide(
    crash_times: Sequence[float], started_at: Sequence[float], now: float, policy: RestartPolicy
) -> Decision:
    """What to do about a service whose latest run (the last entries) has just ended."""
    recent = [t for t in crash_times if now - t <= policy.crash_window_s]
    if len(recent) > policy.max_crashes:
        return Decision(
            "give up",
            reason=f"crashed {len(recent)} times within {policy.crash_window_s:g} s (a crash loop)",
        )
    streak = max(1, crashes_in_a_row(crash_times, started_at, policy))
    delay = min(policy.max_delay_s, policy.first_delay_s * 2 ** (streak - 1))
    return Decision("restart", delay_s=delay)
