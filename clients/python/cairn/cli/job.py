"""`cairn job list` (alias `j`): the job queue of a resource pool, as Determined's `det job list`."""

from __future__ import annotations

import click

from cairn.api.v1 import experiment_pb2, job_pb2
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import (
    build_table,
    enum_label,
    message_to_dict,
    print_json,
    print_renderable,
    timestamp_text,
)
from cairn.cli.state import CliState, json_option, pass_state

JOB_COLUMNS = (
    "#",
    "ID",
    "Type",
    "Name",
    "Priority",
    "Submitted",
    "Slots (acquired/needed)",
    "State",
    "User",
    "Waiting because",
    "Predicted start",
    "After",
)


@click.group(cls=AliasedGroup, aliases={"ls": "list"})
def job() -> None:
    """The job queue: what waits for slots and what holds them."""


@job.command(name="list")
@click.option("-p", "--resource-pool", default="", help="The pool to show (default: the default pool).")
@json_option
@pass_state
def list_jobs(state: CliState, resource_pool: str, as_json: bool) -> None:
    """List the jobs of a pool in queue order (experiments, commands, notebooks, shells,
    TensorBoards, generic tasks), and why each waiting one waits."""
    response = state.session().api.GetJobsV2(job_pb2.GetJobsV2Request(resource_pool=resource_pool, limit=-1))
    jobs = [j.full for j in response.jobs]
    if as_json:
        print_json({"jobs": [message_to_dict(j) for j in jobs]})
        return
    rows = [
        [
            str(j.summary.jobs_ahead),
            j.job_id,
            enum_label(job_pb2.Job.Type.Name(j.type), "TYPE_"),
            f"{j.name} ({j.entity_id})",
            str(j.priority),
            timestamp_text(j.submission_time),
            f"{j.allocated_slots}/{j.requested_slots}",
            enum_label(experiment_pb2.JobSummary.State.Name(j.summary.state)),
            j.username,
            j.waiting_reason,
            timestamp_text(j.predicted_start) if j.HasField("predicted_start") else "",
            j.predicted_after,
        ]
        for j in jobs
    ]
    print_renderable(build_table(JOB_COLUMNS, rows))
