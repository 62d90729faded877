"""The session's seeded generator: what each new trial needs that is random but reproducible.

It is counter-based: draw n comes from a generator seeded with (experiment seed, n), so the whole
generator state is the number of draws made. A snapshot stays small, restoring it needs no Python
internals, and a search rebuilt from a snapshot draws exactly what the original would have.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

# Trial seeds must be < 2**31 (the contract); Optuna's samplers take seeds < 2**32.
TRIAL_SEED_LIMIT = 2**31
SAMPLER_SEED_LIMIT = 2**32


@dataclass(frozen=True)
class Draw:
    request_id: str
    trial_seed: int
    # Seeds the TPE sampler for this one suggestion (see search.py for why each ask gets its own).
    sampler_seed: int


def draw(experiment_seed: int, index: int) -> Draw:
    generator = random.Random((experiment_seed << 64) | index)
    request_id = str(uuid.UUID(int=generator.getrandbits(128), version=4))
    return Draw(
        request_id=request_id,
        trial_seed=generator.randrange(TRIAL_SEED_LIMIT),
        sampler_seed=generator.randrange(SAMPLER_SEED_LIMIT),
    )
