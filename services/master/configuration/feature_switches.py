"""Determined's `feature_switches` (master.yaml): names that turn on features still settling. The
master shows them in GetMaster (`featureSwitches`, which Determined's WebUI reads) and in
`det master config`, where Determined's e2e suite reads them to know what to test. A name that is
not a switch Determined 0.38.1 knows is refused at start, so a typo is not silently a cluster
without the feature.
"""

from __future__ import annotations

from typing import Any

from services.common.errors import InvalidArgument

# Determined's streaming updates (`/stream`): served only with this switch on (gateway/stream_socket.py).
STREAMING_UPDATES = "streaming_updates"

# Every switch Determined 0.38.1 knows, and what turning it on asks of a cluster.
KNOWN_FEATURE_SWITCHES: dict[str, str] = {
    STREAMING_UPDATES: "Determined's streaming update API (the WebUI's live stores)",
    "explist_v2": "the WebUI's newer experiment list",
    "chart": "the WebUI's newer charts",
    "rp_binding": "the WebUI's resource-pool bindings to workspaces",
    "dashboard": "the WebUI's dashboard",
    "trials_comparison": "the WebUI's trials comparison",
}
MAX_FEATURE_SWITCHES = len(KNOWN_FEATURE_SWITCHES)


def parse_feature_switches(value: Any) -> tuple[str, ...]:
    """The config file's `feature_switches` (a list of names), each once, in the order given."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidArgument("feature_switches: a list of switch names")
    unknown = [v for v in value if v not in KNOWN_FEATURE_SWITCHES]
    if unknown:
        raise InvalidArgument(
            f"feature_switches: unknown switch{'es' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(v) for v in unknown)} (known: {', '.join(sorted(KNOWN_FEATURE_SWITCHES))})"
        )
    return tuple(dict.fromkeys(value))
