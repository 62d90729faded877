"""A live chart's stream of metric samples (TrialsSample with period_seconds) waits between samples
on a server thread, so it holds a followed stream's slot meanwhile (servicers/thread_slots.py):
past the last slot it gets its first sample, then RESOURCE_EXHAUSTED naming the setting; a
one-shot sample needs no slot; a slot comes back when its stream ends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import grpc
import pytest

from cairn.api.v1 import trial_pb2
from services.common import interceptors
from services.master.domain.metrics.samples import SampleCache
from services.master.servicers.api.metrics import SamplesApi
from services.master.servicers.thread_slots import FollowSlots
from tests.unit.master.domain.harness import Master
from tests.unit.master.servicer_double import Aborted, Context, api_deps


@pytest.fixture(autouse=True)
def _as_the_admin(master: Master) -> Iterator[None]:
    """The servicer is called without the master's interceptors: the caller they would set."""
    token = interceptors._principal.set(master.admin)
    yield
    interceptors._principal.reset(token)


def _servicer(master: Master, slots: FollowSlots) -> SamplesApi:
    # Only what TrialsSample reads: the domain, the sample cache and the followed streams' slots.
    return SamplesApi(api_deps(master, samples=SampleCache(master.ctx), follow_slots=slots))


def _stream(api: SamplesApi, experiment_id: int, period: int) -> Iterator[trial_pb2.TrialsSampleResponse]:
    request = trial_pb2.TrialsSampleRequest(experiment_id=experiment_id, period_seconds=period)
    return api.TrialsSample(request, cast(Any, Context()))


def test_live_samples_past_the_last_slot_get_one_sample_then_are_refused(master: Master) -> None:
    experiment_id = master.create()
    api = _servicer(master, FollowSlots(1))
    live = _stream(api, experiment_id, period=1)
    next(live)
    next(live)  # the second sample: it holds the one slot while it waits for the third

    refused = _stream(api, experiment_id, period=1)
    next(refused)  # the first sample comes without a slot
    with pytest.raises(Aborted) as exc:
        next(refused)
    assert exc.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-log-followers" in str(exc.value)

    once = _stream(api, experiment_id, period=0)
    assert len(list(once)) == 1  # a one-shot sample needs no slot

    live.close()  # the chart closed: its slot comes back
    again = _stream(api, experiment_id, period=1)
    next(again)
    next(again)
    again.close()
