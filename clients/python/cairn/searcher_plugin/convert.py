"""Between the searcher contract's messages and the kit's plain values.

Structs carry every number as a double: hyperparameters go out as they are (an int hyperparameter's
whole number arrives as a whole double) and the spec comes in with floats, which methods read back
as ints where a field is one (cairn.searcher_plugin.fields).
"""

from __future__ import annotations

from cairn.searcher.v1 import searcher_pb2 as pb
from cairn.searcher_plugin.actions import Action, CreateTrial, SetTrialTarget, StopTrial
from cairn.searcher_plugin.errors import InvalidEvent
from cairn.searcher_plugin.events import (
    EVENT_FIELDS,
    Event,
    ExitReason,
    TrialCreated,
    TrialExited,
    TrialExitedEarly,
    TrialProgress,
    ValidationCompleted,
)
from cairn.searcher_plugin.preview import Preview
from cairn.searcher_plugin.sessions import Answer
from cairn.searcher_plugin.snapshot import Snapshot
from cairn.searcher_plugin.spec import SearchSpec
from cairn.wire import python_to_struct, struct_to_python

_REASONS = {
    pb.TrialExitedEarly.REASON_INVALID_HP: ExitReason.INVALID_HP,
    pb.TrialExitedEarly.REASON_USER_CANCELED: ExitReason.USER_CANCELED,
    pb.TrialExitedEarly.REASON_ERRORED: ExitReason.ERRORED,
    pb.TrialExitedEarly.REASON_INIT_INVALID_HP: ExitReason.INIT_INVALID_HP,
}


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
        v = message.validation_completed
        return ValidationCompleted(v.request_id, struct_to_python(v.metrics), v.steps_completed)
    if kind == "trial_progress":
        return TrialProgress(message.trial_progress.request_id, message.trial_progress.progress)
    if kind == "trial_exited_early":
        early = message.trial_exited_early
        reason = _REASONS.get(early.reason)
        if reason is None:
            raise InvalidEvent(
                f"event.trial_exited_early.reason: must be INVALID_HP, USER_CANCELED, ERRORED or "
                f"INIT_INVALID_HP, got {early.reason}"
            )
        return TrialExitedEarly(early.request_id, reason)
    if kind == "trial_exited":
        return TrialExited(message.trial_exited.request_id)
    raise InvalidEvent(f"event: must set one of {', '.join(EVENT_FIELDS.values())}")


def action_to_proto(action: Action) -> pb.SearcherAction:
    if isinstance(action, CreateTrial):
        return pb.SearcherAction(
            create=pb.CreateTrial(
                request_id=action.request_id,
                hparams=python_to_struct(action.hparams),
                trial_seed=action.trial_seed,
                target_length=action.target_length,
            )
        )
    if isinstance(action, StopTrial):
        return pb.SearcherAction(stop=pb.StopTrial(request_id=action.request_id))
    if isinstance(action, SetTrialTarget):
        return pb.SearcherAction(
            set_target=pb.SetTrialTarget(request_id=action.request_id, target_length=action.target_length)
        )
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
                request_id=trial.request_id,
                hparams=python_to_struct(trial.hparams),
                lengths=list(trial.lengths),
                bracket=trial.bracket,
            )
            for trial in result.trials
        ],
        unit=result.unit,
    )
