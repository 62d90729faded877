"""How a master holds its leader lease on PostgreSQL (leadership.py): the periods of its polls and
checks, set by flags and handed down with the settings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LeaseTiming:
    # How often a standby tries for the lease.
    poll_interval_s: float = 1.0
    # How often the leader checks the connection that holds its lock.
    check_interval_s: float = 1.0
    # Between winning the lease from another master and serving: longer than that master needs to
    # notice it lost it (a check, plus a reconnect that finds the lock taken).
    takeover_delay_s: float = 5.0
    # How long a leader may go without its lock connection (a database restart) before it gives up.
    regain_within_s: float = 60.0
