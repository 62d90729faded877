"""Continuing an ended experiment (`det experiment continue`)."""

from __future__ import annotations

import grpc

from cairn.api.v1 import experiment_pb2 as epb
from services.master.domain.experiments import continuation
from services.master.domain.reads import experiments as reads
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc


class ContinuationApi(ServicerBase):
    @rpc
    def ContinueExperiment(
        self, request: epb.ContinueExperimentRequest, context: grpc.ServicerContext
    ) -> epb.ContinueExperimentResponse:
        continuation.continue_experiment(self.ctx, self.user(context), request.id, request.override_config)
        with self.ctx.db.read() as s:
            row = reads.experiment_row(s, request.id)
        return epb.ContinueExperimentResponse(experiment=convert.experiment(row))
