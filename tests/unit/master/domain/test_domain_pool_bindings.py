"""Resource pools bound to workspaces (domain/workspaces/pool_bindings.py): a bound pool takes new
work only from its workspaces (experiments, their edits and continuations, tasks, workspace
defaults), the default pools cannot be bound, only an admin changes bindings, every refusal names
the field and changes nothing, and bindings outlive a restart and go with their workspace."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select

from services.master.configuration.pools import PoolSettings
from services.master.domain.experiments import continuation, creation, experiment_edits
from services.master.domain.kernel.errors import InvalidArgument, NotFound, PermissionDenied
from services.master.domain.kernel.states import TaskKind
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.tasks import tasks
from services.master.domain.workspaces import pool_bindings as pb
from services.master.domain.workspaces import workspaces
from services.master.store import models
from tests.unit.master.domain.harness import Master, config_text

pytestmark = pytest.mark.on_each_database

POOLS = (PoolSettings("default"), PoolSettings("gpus"), PoolSettings("spare"))


@pytest.fixture
def cluster(master: Master) -> Iterator[Master]:
    """A master whose config has three pools: default (the default), gpus and spare."""
    master.close()
    pooled = master.restarted(pools=POOLS)
    try:
        yield pooled
    finally:
        pooled.close()


def _workspace(master: Master, name: str, **settings: Any) -> int:
    with master.ctx.unit_of_work() as w:
        return workspaces.create_workspace(
            master.ctx, w, master.admin, name, workspaces.WorkspaceSettings(**settings)
        )


def _project(master: Master, workspace_id: int, name: str = "p") -> int:
    with master.ctx.unit_of_work() as w:
        return int(workspaces.create_project(w, master.admin, workspace_id, name, None, None))


def _experiment(master: Master, project_id: int, **config: Any) -> int:
    request = creation.CreateRequest(
        config_text=config_text(**config),
        files=[ContextFile(path="train.py", type=ord("0"), content=b"print('hi')\n", mtime=0, mode=0o644)],
        activate=True,
        validate_only=False,
        project_id=project_id,
    )
    created = creation.create(master.ctx, master.admin, request)
    assert created.experiment_id is not None
    return created.experiment_id


def _bindings(master: Master) -> set[tuple[str, int]]:
    with master.db.read() as s:
        return {
            (pool, wid)
            for pool, wid in s.execute(select(models.PoolBinding.pool_name, models.PoolBinding.workspace_id))
        }


def _refused(master: Master, error: type[Exception], match: str, action: Callable[[], Any]) -> None:
    before = _bindings(master)
    with pytest.raises(error, match=match):
        action()
    assert _bindings(master) == before


def test_binding_by_name_or_id_lists_both_ways_and_replace_and_unbind_change_it(cluster: Master) -> None:
    ctx, admin = cluster.ctx, cluster.admin
    a, b, c = (_workspace(cluster, name) for name in ("A", "B", "C"))
    pb.bind(ctx, admin, "gpus", [a], ["B", "A"])  # a workspace named twice is bound once
    assert pb.workspaces_bound_to(ctx, "gpus", 0, 0)[0] == [a, b]
    # Every pool but a bound one is open to a workspace; the bound one to its workspaces only.
    assert pb.pools_available_to(ctx, a, 0, 0)[0] == ["default", "gpus", "spare"]
    assert pb.pools_available_to(ctx, c, 0, 0)[0] == ["default", "spare"]
    assert pb.unbound_pool_names(ctx) == {"default", "spare"}
    names, page = pb.pools_available_to(ctx, a, 1, 1)  # Determined's paging
    assert names == ["gpus"] and (page.start, page.end, page.total) == (1, 2, 3)

    pb.replace(ctx, admin, "gpus", [c], [])
    assert pb.workspaces_bound_to(ctx, "gpus", 0, 0)[0] == [c]
    pb.unbind(ctx, admin, "gpus", [], ["C"])
    assert _bindings(cluster) == set() and pb.unbound_pool_names(ctx) == {"default", "gpus", "spare"}
    pb.bind(ctx, admin, "spare", [a, b], [])
    pb.replace(ctx, admin, "spare", [], [])  # replacing with none shares the pool again
    assert _bindings(cluster) == set()


def test_bad_bindings_are_refused_naming_the_field_and_change_nothing(cluster: Master) -> None:
    ctx, admin = cluster.ctx, cluster.admin
    a = _workspace(cluster, "A")
    pb.bind(ctx, admin, "gpus", [a], [])
    user = cluster.add_user("alice")
    _refused(cluster, PermissionDenied, "only an admin", lambda: pb.bind(ctx, user, "spare", [a], []))
    _refused(cluster, PermissionDenied, "only an admin", lambda: pb.unbind(ctx, user, "gpus", [a], []))
    _refused(cluster, PermissionDenied, "only an admin", lambda: pb.replace(ctx, user, "gpus", [], []))
    _refused(
        cluster,
        InvalidArgument,
        "resourcePoolName: pool with name 'tpu' doesn't exist in config",
        lambda: pb.bind(ctx, admin, "tpu", [a], []),
    )
    _refused(
        cluster,
        InvalidArgument,
        "default resource pool default cannot be bound to any workspace",
        lambda: pb.bind(ctx, admin, "default", [a], []),
    )
    _refused(
        cluster,
        InvalidArgument,
        "default resource pool default cannot be bound",
        lambda: pb.replace(ctx, admin, "default", [a], []),
    )
    _refused(
        cluster,
        NotFound,
        "workspaceNames: workspace 'Nope' not found",
        lambda: pb.bind(ctx, admin, "spare", [a], ["Nope"]),
    )
    _refused(
        cluster,
        NotFound,
        "workspaceIds: workspace 999 not found",
        lambda: pb.replace(ctx, admin, "gpus", [999], []),
    )
    _refused(
        cluster, InvalidArgument, "already bound to workspace", lambda: pb.bind(ctx, admin, "gpus", [a], [])
    )
    _refused(
        cluster, NotFound, "is not bound to pool 'spare'", lambda: pb.unbind(ctx, admin, "spare", [a], [])
    )
    _refused(
        cluster, InvalidArgument, "name at least one workspace", lambda: pb.bind(ctx, admin, "spare", [], [])
    )
    too_many = list(range(pb.MAX_WORKSPACES_PER_CALL + 1))
    _refused(
        cluster,
        InvalidArgument,
        "at most 1000 workspaces",
        lambda: pb.bind(ctx, admin, "spare", too_many, []),
    )
    with pytest.raises(NotFound, match="workspace 999 not found"):
        pb.pools_available_to(ctx, 999, 0, 0)


def test_a_bound_pool_takes_new_work_only_from_its_workspaces(cluster: Master) -> None:
    ctx, admin = cluster.ctx, cluster.admin
    team, other = _workspace(cluster, "Team"), _workspace(cluster, "Other")
    team_project, other_project = _project(cluster, team), _project(cluster, other)
    pb.bind(ctx, admin, "gpus", [team], [])
    gpus = {"resources": {"resource_pool": "gpus"}}

    ours = _experiment(cluster, team_project, **gpus)
    assert cluster.experiment(ours).resource_pool == "gpus"
    with pytest.raises(
        InvalidArgument,
        match=r"resources\.resource_pool: resource pool 'gpus' is bound to other workspaces, "
        r"not to workspace 'Other'",
    ):
        _experiment(cluster, other_project, **gpus)
    with cluster.db.read() as s:
        assert (
            s.scalar(select(models.Experiment.id).where(models.Experiment.project_id == other_project))
            is None
        )

    # A task launched in the other workspace, and the other workspace's default pools.
    with pytest.raises(
        InvalidArgument, match=r"config\.resources\.resource_pool: resource pool 'gpus' is bound"
    ):
        config = {"entrypoint": "true", "resources": {"resource_pool": "gpus"}}
        tasks.create(ctx, admin, tasks.TaskRequest(kind=TaskKind.COMMAND, config=config, workspace_id=other))
    with (
        pytest.raises(InvalidArgument, match="defaultComputePool: resource pool 'gpus' is bound"),
        ctx.unit_of_work() as w,
    ):
        workspaces.patch_workspace(
            ctx, w, admin, other, None, workspaces.WorkspaceSettings(default_compute_pool="gpus")
        )
    with pytest.raises(InvalidArgument, match="defaultAuxPool: resource pool 'gpus' is bound"):
        _workspace(cluster, "New", default_aux_pool="gpus")
    with cluster.db.read() as s:
        assert s.scalar(select(models.Workspace.id).where(models.Workspace.name == "New")) is None
    _workspace(cluster, "Newer", default_compute_pool="spare")  # an unbound pool is open to all

    # Moving the other workspace's experiment to the bound pool, or continuing it there.
    theirs = _experiment(cluster, other_project)
    with (
        pytest.raises(InvalidArgument, match="resource_pool: resource pool 'gpus' is bound"),
        ctx.unit_of_work() as w,
    ):
        exp = w.session.get_one(models.Experiment, theirs)
        experiment_edits.apply(ctx, w, exp, experiment_edits.ExperimentEdit(resource_pool="gpus"))
    assert cluster.experiment(theirs).resource_pool == "default"
    exp = cluster.experiment(theirs)
    with pytest.raises(InvalidArgument, match=r"resources\.resource_pool: resource pool 'gpus' is bound"):
        continuation.merged_config(ctx, exp, {"resources": {"resource_pool": "gpus"}})

    # Unbinding leaves work already placed where it is; the pool is then open to everyone.
    pb.unbind(ctx, admin, "gpus", [team], [])
    assert cluster.experiment(ours).resource_pool == "gpus"
    _experiment(cluster, other_project, **gpus)


def test_bindings_outlive_a_restart_and_go_with_their_workspace(cluster: Master) -> None:
    ctx, admin = cluster.ctx, cluster.admin
    keep, drop = _workspace(cluster, "Keep"), _workspace(cluster, "Drop")
    pb.bind(ctx, admin, "gpus", [keep, drop], [])
    cluster.close()
    again = cluster.restarted()
    try:
        assert pb.workspaces_bound_to(again.ctx, "gpus", 0, 0)[0] == [keep, drop]
        with again.ctx.unit_of_work() as w:
            w.session.delete(w.session.get_one(models.Workspace, drop))
        assert pb.workspaces_bound_to(again.ctx, "gpus", 0, 0)[0] == [keep]
    finally:
        again.close()
