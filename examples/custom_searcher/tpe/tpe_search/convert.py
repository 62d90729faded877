"""Between the contract's messages and the search's values.

Structs carry every number as a double: an int hyperparameter's whole number goes out as a whole
double, and the spec's integers come in as doubles that config.py and space.py read back as ints.
"""

from __future__ import annotations

from cairn.searcher.v1 import searcher_pb2 as pb
from cairn.wire import python_to_struct, struct_to_python

from .actions import Action, CreateTrial
from .errors import InvalidArgument
from .events import (
    Event,
    ExitReason,
    TrialCreated,
    TrialExited,
    TrialExitedEarly,
    TrialProgress,
    ValidationCompleted,
)
from .preview import Preview
from .sessions import Answer
from .snapshot import Snapshot
from .spec import SearchSpec

_REASONS = {
    pb.TrialExitedEarly.REASON_INVALID_HP: ExitReason.INVALID_HP,
    pb.TrialExitedEarly.REASON_INIT_INVALID_HP: ExitReason.INIT_INVALID_HP,
    pb.TrialExitedEarly.REASON_USER_CANCELED: ExitReason.USER_CANCELED,
    pb.TrialExitedEarly.REASON_ERRORED: ExitReason.ERRORED,
}
_EVENT_KINDS = (
    "trial_created",
    "validation_completed",
    "trial_progress",
    "trial_exited_early",
    "trial_exited",
)


def spec_from_proto(message: pb.SearchSpec) -> SearchSpec:
    return SearchSpec(
        searcher=struct_to_python(message.searcher),
        hyperparameters=struct_to_python(message.hyperparameters),
        seed=message.seed,
    )


def event_from_proto(message: pb.SearcherEvent) -> Event:
    kind = message.WhichOneof("event")
    if kind == "trial_created":
        return TrialCreated(message.trial_created.request_id)
    if kind == "validation_completed":
        report = message.validation_completed
        return ValidationCompleted(
            report.request_id, struct_to_python(report.metrics), report.steps_completed
        )
    if kind == "trial_progress":
        return TrialProgress(message.trial_progress.request_id, message.trial_progress.progress)
    if kind == "trial_exited_early":
        early = message.trial_exited_early
        reason = _REASONS.get(early.reason)
        if reason is None:
            raise InvalidArgument(
                "event.trial_exited_early.reason: must be INVALID_HP, INIT_INVALID_HP, USER_CANCELED or "
                f"ERRORED, got {early.reason}"
            )
        return TrialExitedEarly(early.request_id, reason)
    if kind == "trial_exited":
        return TrialExited(message.trial_exited.request_id)
    raise InvalidArgument(f"event: must set one of {', '.join(_EVENT_KINDS)}")


def action_to_proto(action: Action) -> pb.SearcherAction:
    if isinstance(action, CreateTrial):
        create = pb.CreateTrial(
            request_id=action.request_id,
            hparams=python_to_struct(action.hparams),
            trial_seed=action.trial_seed,
        )
        return pb.SearcherAction(create=create)
    return pb.SearcherAction(shutdown=pb.Shutdown(cancel=action.cancel, failure=action.failure))


def snapshot_to_proto(snapshot: Snapshot) -> pb.Snapshot:
    return pb.Snapshot(
        seq=snapshot.seq, state=snapshot.state, method=snapshot.method, version=snapshot.version
    )


def snapshot_from_proto(message: pb.Snapshot) -> Snapshot:
    return Snapshot(seq=message.seq, state=message.state, method=message.method, version=message.version)


def answer_to_proto(answer: Answer) -> pb.SearcherResponse:
    return pb.SearcherResponse(
        actions=[action_to_proto(a) for a in answer.actions],
        snapshot=snapshot_to_proto(answer.snapshot),
        progress=answer.progress,
    )


def preview_to_proto(result: Preview) -> pb.PreviewSearchResponse:
    return pb.PreviewSearchResponse(
        trials=[
            pb.PreviewedTrial(
                request_id=trial.request_id, hparams=python_to_struct(trial.hparams), lengths=result.lengths
            )
            for trial in result.trials
        ],
        unit=result.unit,
    )
