"""Which requests a pool's agents can ever hold, whatever runs on them now: the gang rule the
scheduler places by and the provisioner sizes its instances by, written once for both."""

from __future__ import annotations


def fits_shape(slots: int, instance_slots: int) -> bool:
    """Whether instances of `instance_slots` slots can ever hold a request of `slots`: within one
    instance, or spread whole over several (gang scheduling gives each agent all its slots)."""
    if slots <= instance_slots:
        return True
    return instance_slots > 0 and slots % instance_slots == 0
