"""Every mutating REST route, driven as each role, is allowed or refused as its decision says
(identity/rpc_decisions.py): generated from the gateway's route table (the proto's google.api.http
rules), so a new route without a decision, or without a request here to drive it, fails.

One in-process master (tests/unit/master/rest_in_process.py): the real gateway, interceptors,
access gate and servicers over the domain, no sockets. The objects every route names live in one
workspace W and belong to the admin; each user holds one role, on W or cluster-wide, or a role on
another workspace only ("elsewhere": past the gate, refused on W's objects). A call is refused
when it answers 403 or 404 (an object of a workspace one may not read is not found); allowed when
it answers anything else (the call may still fail for its own reasons past the access checks).
After a call that changed something (a 2xx), every object is made afresh."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import cached_property
from typing import Any

import pytest

from services.master.configuration.pools import PoolSettings
from services.master.domain.checkpoints import model_registry
from services.master.domain.experiments import templates, unmanaged
from services.master.domain.identity import access_tokens, groups, role_assignments, roles, users
from services.master.domain.identity.permissions import Permission
from services.master.domain.identity.role_assignments import Assignment, Requested
from services.master.domain.identity.rpc_decisions import DECISIONS, Decision, Kind
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.states import TaskKind
from services.master.domain.reads.jobs import JOB_ID_PREFIX
from services.master.domain.tasks import tasks
from services.master.domain.webhooks import registry as webhooks
from services.master.domain.workspaces import pool_bindings, pool_shares, workspaces
from services.master.gateway.http_rules import http_bindings
from services.master.store import models
from tests.support.databases import migrated_sqlite
from tests.unit.master.domain.harness import Master
from tests.unit.master.rest_in_process import SERVICE, RestApi

POOLS = (PoolSettings("default"), PoolSettings("gpus"), PoolSettings("fair", scheduler_type="fair_share"))

# Each user's role: on W (the objects' workspace), cluster-wide, or on another workspace only.
ROLE_ON_W = {
    "viewer": roles.VIEWER,
    "editor_restricted": roles.EDITOR_RESTRICTED,
    "editor": roles.EDITOR,
    "workspace_admin": roles.WORKSPACE_ADMIN,
}
CLUSTER_ROLE = {"workspace_creator": roles.WORKSPACE_CREATOR, "cluster_admin": roles.CLUSTER_ADMIN}
USERS = ("none", *ROLE_ON_W, *CLUSTER_ROLE, "elsewhere")
_names = itertools.count(1)


def held_on_w(user: str) -> tuple[frozenset[Permission], frozenset[Permission]]:
    """(cluster-wide, on W) permissions of the user's role."""
    if user in CLUSTER_ROLE:
        held = CLUSTER_ROLE[user].permissions
        return held, held
    return frozenset(), ROLE_ON_W[user].permissions if user in ROLE_ON_W else frozenset()


def expected_allowed(decision: Decision, user: str) -> bool:
    cluster, on_w = held_on_w(user)
    if decision.kind in (Kind.PUBLIC, Kind.USER, Kind.READ):
        return True
    if decision.kind is Kind.TRIAL_CODE:
        return False
    if decision.kind in (Kind.CLUSTER, Kind.SELF):  # SELF: every request here names another user
        return decision.permission in cluster
    needed = {decision.permission, *decision.also} | ({decision.others} if decision.others else set())
    return needed <= on_w


class Objects:
    """What the routes name, all in workspace `w`, all the admin's. The workspaces and the roles
    on them are made at once; every other object the first time a route names it."""

    def __init__(self, world: World) -> None:
        self._world = world
        n = self.n = next(_names)
        ctx, admin = world.ctx, world.admin
        self.w_name = f"w{n}"
        with ctx.unit_of_work() as w:
            self.w = workspaces.create_workspace(ctx, w, admin, f"w{n}", workspaces.WorkspaceSettings())
            self.w2 = workspaces.create_workspace(ctx, w, admin, f"w{n}b", workspaces.WorkspaceSettings())
            self.project = workspaces.create_project(w, admin, self.w, f"p{n}", None, None)
            self.destination = workspaces.create_project(w, admin, self.w, f"q{n}", None, None)
        ids = world.ids
        world.assign(
            [
                *(Assignment(r.id, user_id=ids[u], workspace_id=self.w) for u, r in ROLE_ON_W.items()),
                Assignment(roles.EDITOR.id, user_id=ids["elsewhere"], workspace_id=self.w2),
                Assignment(roles.VIEWER.id, user_id=ids["victim"], workspace_id=self.w),
            ]
        )
        pool_bindings.bind(ctx, admin, "gpus", [self.w], [])
        pool_shares.set_share(ctx, admin, self.w, "fair", weight=3.0)
        self.victim = ids["victim"]

    @cached_property
    def experiment(self) -> int:
        return self._world.master.create(workspace=self.w_name, project=f"p{self.n}")

    @cached_property
    def trial(self) -> int:
        (trial,) = self._world.master.trials(self.experiment)
        return trial.id

    @cached_property
    def allocation(self) -> str:
        return self._world.master.allocations(self.trial)[-1].id

    @cached_property
    def trial_task(self) -> str:
        return self.allocation.rsplit(".", 1)[0]

    @cached_property
    def unmanaged_task(self) -> str:
        """The task of an unmanaged experiment's trial, where its code ships its output."""
        ctx, admin = self._world.ctx, self._world.admin
        text = f"name: u\nworkspace: {self.w_name}\nproject: p{self.n}\n{_SEARCHER}"
        created = unmanaged.create_experiment(ctx, admin, text)
        unmanaged.create_trial(ctx, admin, created.experiment_id, {}, external_id="run")
        return f"{created.experiment_id}.run"

    @cached_property
    def checkpoint(self) -> str:
        uuid = f"ckpt-{self.n}"
        with self._world.ctx.unit_of_work() as w:
            w.session.add(
                models.Checkpoint(
                    uuid=uuid,
                    trial_id=self.trial,
                    allocation_id=self.allocation,
                    task_id=self.trial_task,
                    report_time=utcnow(),
                    state="COMPLETED",
                    resources={"a": 1},
                    metadata_={"steps_completed": 1},
                    steps_completed=1,
                )
            )
        return uuid

    @cached_property
    def model(self) -> str:
        ctx, admin, name = self._world.ctx, self._world.admin, f"m{self.n}"
        with ctx.unit_of_work() as w:
            model_registry.create_model(
                ctx, w, admin, model_registry.NewModel(name=name, workspace_id=self.w)
            )
        model_registry.register_version(
            ctx, admin, name, model_registry.NewVersion(checkpoint_uuid=self.checkpoint)
        )
        return name

    def _launch(self, kind: TaskKind, config: dict[str, Any], **arguments: Any) -> str:
        request = tasks.TaskRequest(
            kind=kind, config={"resources": {"slots": 0}, **config}, workspace_id=self.w, arguments=arguments
        )
        return tasks.create(self._world.ctx, self._world.admin, request)

    @cached_property
    def notebook(self) -> str:
        return self._launch(TaskKind.NOTEBOOK, {})

    @cached_property
    def tensorboard(self) -> str:
        return self._launch(TaskKind.TENSORBOARD, {}, experiment_ids=[self.experiment])

    @cached_property
    def shell(self) -> str:
        return self._launch(TaskKind.SHELL, {})

    @cached_property
    def command(self) -> str:
        return self._launch(TaskKind.COMMAND, {"entrypoint": ["true"]})

    @cached_property
    def generic(self) -> str:
        return self._launch(TaskKind.GENERIC, {"entrypoint": ["true"]})

    @cached_property
    def template(self) -> str:
        ctx, name = self._world.ctx, f"t{self.n}"
        with ctx.unit_of_work() as w:
            templates.create(ctx, w, self._world.admin, name, {"description": "x"}, workspace_id=self.w)
        return name

    @cached_property
    def webhook(self) -> int:
        spec = webhooks.WebhookSpec(
            name=f"h{self.n}",
            url="http://127.0.0.1:9/hook",
            webhook_type=webhooks.DEFAULT,
            mode=webhooks.SPECIFIC,
            workspace_id=self.w,
            triggers=(webhooks.TriggerSpec(webhooks.CUSTOM),),
        )
        with self._world.ctx.unit_of_work() as w:
            return webhooks.create(w, self._world.admin, spec).id

    @cached_property
    def victim_token(self) -> int:
        """An access token of the victim's (a user no role of this test acts as)."""
        _, token_id = access_tokens.create(self._world.ctx, self._world.admin, self.victim, None, "t")
        return token_id

    @cached_property
    def revocable_agent(self) -> str:
        """An agent of its own, so that revoking it leaves the agent every other route names."""
        agent_id = f"r{self.n}"
        self._world.master.add_agent(agent_id, slots=1)
        return agent_id

    @cached_property
    def group(self) -> int:
        return groups.create(self._world.ctx, self._world.admin, f"g{self.n}", []).id


class World:
    """The master, its users (each logged in, each with one role) and the objects."""

    def __init__(self, master: Master) -> None:
        self.master = master
        self.ctx = master.ctx
        self.admin = master.admin
        self.api = RestApi(master)
        self.ids: dict[str, int] = {}
        for name in (*USERS, "victim"):
            changes = users.UserChanges(username=name)
            self.ids[name] = users.create(master.db, self.admin, changes, f"Pw-{name}-1", False).id
        # No default roles: each user holds exactly the role of this test.
        (everyone,) = groups.listing(master.db, groups.GroupQuery(name="everyone"))[0]
        groups.delete_group(self.ctx, self.admin, everyone.id)
        self.assign([Assignment(r.id, user_id=self.ids[u]) for u, r in CLUSTER_ROLE.items()])
        master.add_agent("a1", slots=1)
        self.login()
        self.objects = Objects(self)

    def login(self) -> None:
        self.tokens = {name: self.api.login(name, f"Pw-{name}-1") for name in USERS}

    def assign(self, assignments: list[Assignment]) -> None:
        asked = [Requested(a, f"userRoleAssignments[{i}]") for i, a in enumerate(assignments)]
        role_assignments.assign(self.ctx, self.admin, asked)


# What each mutating route is sent: its path's fields and its body, naming the objects.
Recipe = Callable[[Objects], tuple[dict[str, Any], Any]]


def _runs(o: Objects) -> tuple[dict[str, Any], Any]:
    return {}, {"runIds": [o.trial], "projectId": o.project}


def _bulk(o: Objects) -> tuple[dict[str, Any], Any]:
    return {"project_id": o.project}, {"experimentIds": [o.experiment], "projectId": o.project}


def _exp(o: Objects) -> tuple[dict[str, Any], Any]:
    return {"id": o.experiment}, None


_METRICS = {"trialRunId": 1, "stepsCompleted": 1, "metrics": {"avgMetrics": {"loss": 1.0}}}
_SEARCHER = "searcher: {name: single, metric: loss, max_length: {batches: 1}}\n"
_CODE = "T2JqZWN0"  # any bytes (base64): a model definition's file


def _user_assignment(o: Objects, user_id: int, role_id: int) -> dict[str, Any]:
    return {
        "userRoleAssignments": [
            {"userId": user_id, "roleAssignment": {"role": {"roleId": role_id}, "scopeWorkspaceId": o.w}}
        ]
    }


RECIPES: dict[str, Recipe] = {
    "SearchRuns": lambda o: ({}, {"projectId": o.project}),
    "KillRuns": _runs,
    "PauseRuns": _runs,
    "ResumeRuns": _runs,
    "MoveRuns": lambda o: (
        {},
        {"runIds": [o.trial], "sourceProjectId": o.project, "destinationProjectId": o.destination},
    ),
    "ArchiveRuns": _runs,
    "UnarchiveRuns": _runs,
    "DeleteRuns": _runs,
    "PostRunMetadata": lambda o: ({"run_id": o.trial}, {"metadata": {"k": "v"}}),
    "KillExperiments": _bulk,
    "PauseExperiments": _bulk,
    "ActivateExperiments": _bulk,
    "CancelExperiments": _bulk,
    "ArchiveExperiments": _bulk,
    "UnarchiveExperiments": _bulk,
    "DeleteExperiments": _bulk,
    "MoveExperiments": lambda o: (
        {"project_id": o.project},
        {"experimentIds": [o.experiment], "projectId": o.project, "destinationProjectId": o.destination},
    ),
    "SearchExperiments": lambda o: ({}, {"projectId": o.project}),
    "Login": lambda o: ({}, {"username": "victim", "password": "Pw-victim-1"}),
    "Logout": lambda o: ({}, None),
    "PostUser": lambda o: (
        {},
        {"user": {"username": f"new{next(_names)}", "active": True}, "password": "Pw-new-123"},
    ),
    "PatchUser": lambda o: ({"user_id": o.victim}, {"displayName": f"V{next(_names)}"}),
    "SetUserPassword": lambda o: ({"user_id": o.victim}, "Pw-victim-1"),
    "PostAccessToken": lambda o: ({}, {"userId": o.victim, "description": "automation"}),
    "PatchAccessToken": lambda o: ({"token_id": o.victim_token}, {"description": f"d{next(_names)}"}),
    "CreateExperiment": lambda o: (
        {},
        {
            "config": f"name: x\nentrypoint: python3 train.py\n{_SEARCHER}",
            "modelDefinition": [{"path": "train.py", "type": 48, "content": _CODE, "mode": 420}],
            "projectId": o.project,
        },
    ),
    "PutExperiment": lambda o: (
        {"external_experiment_id": f"ext-{next(_names)}"},
        {
            "config": "name: x\nsearcher: {name: single, metric: loss}\n",
            "projectId": o.project,
            "unmanaged": True,
        },
    ),
    "ActivateExperiment": _exp,
    "PauseExperiment": _exp,
    "CancelExperiment": _exp,
    "KillExperiment": _exp,
    "PatchExperiment": lambda o: ({"experiment.id": o.experiment}, {"name": "renamed"}),
    "ArchiveExperiment": _exp,
    "UnarchiveExperiment": _exp,
    "DeleteExperiment": lambda o: ({"experiment_id": o.experiment}, None),
    "PreviewHPSearch": lambda o: (
        {},
        {"configText": "searcher: {name: single, metric: loss, max_length: {batches: 1}}\n"},
    ),
    "CreateTrial": lambda o: ({}, {"experimentId": o.experiment, "hparams": {}, "unmanaged": True}),
    "PutTrial": lambda o: (
        {},
        {"createTrialRequest": {"experimentId": o.experiment, "unmanaged": True}, "externalTrialId": "x"},
    ),
    "PatchTrial": lambda o: ({"trial_id": o.trial}, {"state": "STATE_RUNNING"}),
    "StartTrial": lambda o: ({"trial_id": o.trial}, {}),
    "ShipTaskLogs": lambda o: (
        {},
        [{"taskId": o.unmanaged_task, "log": "hi", "timestamp": "2026-01-01T00:00:00Z"}],
    ),
    "KillTrial": lambda o: ({"id": o.trial}, None),
    "ReportTrialMetrics": lambda o: (
        {"metrics.trial_id": o.trial},
        {"metrics": _METRICS, "group": "training"},
    ),
    "ReportTrialMetricsBatch": lambda o: ({"trial_id": o.trial}, {"trialRunId": 1, "reports": []}),
    "RunPrepareForReporting": lambda o: ({}, {"runId": o.trial}),
    "ReportTrialProgress": lambda o: ({"trial_id": o.trial}, {"progress": 0.5}),
    "PostTrialRunnerMetadata": lambda o: ({"trial_id": o.trial}, {"state": "x"}),
    "ReportTrialSearcherEarlyExit": lambda o: ({"trial_id": o.trial}, {"reason": "EXITED_REASON_INVALID_HP"}),
    "CompleteTrialSearcherValidation": lambda o: (
        {"trial_id": o.trial},
        {"validateAfter": {"length": "1"}},
    ),
    "ReportCheckpoint": lambda o: (
        {},
        {
            "uuid": f"new-{next(_names)}",
            "allocationId": o.allocation,
            "metadata": {"steps_completed": 1},
            "state": "STATE_COMPLETED",
        },
    ),
    "DeleteCheckpoints": lambda o: ({}, {"checkpointUuids": [o.checkpoint]}),
    "PatchCheckpoints": lambda o: (
        {},
        {"checkpoints": [{"uuid": o.checkpoint, "resources": {"resources": {}}}]},
    ),
    "CheckpointsRemoveFiles": lambda o: (
        {},
        {"checkpointUuids": [o.checkpoint], "checkpointGlobs": ["*.bin"]},
    ),
    "EnableAgent": lambda o: ({"agent_id": "a1"}, None),
    "DisableAgent": lambda o: ({"agent_id": "a1"}, {}),
    "EnableSlot": lambda o: ({"agent_id": "a1", "slot_id": "0"}, None),
    "DisableSlot": lambda o: ({"agent_id": "a1", "slot_id": "0"}, {}),
    "CreateAgentJoinToken": lambda o: ({}, {"agentId": f"joining-{next(_names)}"}),
    "RotateAgentEnrolmentSecret": lambda o: ({}, {}),
    "RevokeAgent": lambda o: ({"agent_id": o.revocable_agent}, {}),
    "BindRPToWorkspace": lambda o: ({"resource_pool_name": "gpus"}, {"workspaceIds": [o.w2]}),
    "OverwriteRPWorkspaceBindings": lambda o: ({"resource_pool_name": "gpus"}, {"workspaceIds": [o.w]}),
    "UnbindRPFromWorkspace": lambda o: ({"resource_pool_name": "gpus"}, {"workspaceIds": [o.w]}),
    "UpdateJobQueue": lambda o: (
        {},
        {"updates": [{"jobId": f"{JOB_ID_PREFIX}{o.experiment}", "priority": 10}]},
    ),
    "AckAllocationPreemptionSignal": lambda o: ({"allocation_id": o.allocation}, {}),
    "NotifyAllocationExiting": lambda o: ({"allocation_id": o.allocation}, {}),
    "LaunchNotebook": lambda o: ({}, {"config": {"resources": {"slots": 0}}, "workspaceId": o.w}),
    "KillNotebook": lambda o: ({"notebook_id": o.notebook}, None),
    "SetNotebookPriority": lambda o: ({"notebook_id": o.notebook}, {"priority": 10}),
    "IdleNotebook": lambda o: ({"notebook_id": o.notebook}, {"idle": True}),
    "AllocationReady": lambda o: ({"allocation_id": o.allocation}, {}),
    "LaunchTensorboard": lambda o: ({}, {"experimentIds": [o.experiment], "workspaceId": o.w}),
    "KillTensorboard": lambda o: ({"tensorboard_id": o.tensorboard}, None),
    "SetTensorboardPriority": lambda o: ({"tensorboard_id": o.tensorboard}, {"priority": 10}),
    "LaunchShell": lambda o: ({}, {"config": {"resources": {"slots": 0}}, "workspaceId": o.w}),
    "KillShell": lambda o: ({"shell_id": o.shell}, None),
    "SetShellPriority": lambda o: ({"shell_id": o.shell}, {"priority": 10}),
    "LaunchCommand": lambda o: (
        {},
        {"config": {"entrypoint": ["true"], "resources": {"slots": 0}}, "workspaceId": o.w},
    ),
    "KillCommand": lambda o: ({"command_id": o.command}, None),
    "SetCommandPriority": lambda o: ({"command_id": o.command}, {"priority": 10}),
    "CreateGenericTask": lambda o: (
        {},
        {"config": 'entrypoint: ["true"]\nresources: {slots: 0}\n', "projectId": o.project},
    ),
    "KillGenericTask": lambda o: ({"task_id": o.generic}, {}),
    "PauseGenericTask": lambda o: ({"task_id": o.generic}, None),
    "UnpauseGenericTask": lambda o: ({"task_id": o.generic}, None),
    "PostModel": lambda o: ({}, {"name": f"nm{next(_names)}", "workspaceId": o.w}),
    "PatchModel": lambda o: ({"model_name": o.model}, {"description": "changed"}),
    "ArchiveModel": lambda o: ({"model_name": o.model}, None),
    "UnarchiveModel": lambda o: ({"model_name": o.model}, None),
    "DeleteModel": lambda o: ({"model_name": o.model}, None),
    "PostModelVersion": lambda o: ({"model_name": o.model}, {"checkpointUuid": o.checkpoint}),
    "PatchModelVersion": lambda o: ({"model_name": o.model, "model_version_num": 1}, {"comment": "changed"}),
    "DeleteModelVersion": lambda o: ({"model_name": o.model, "model_version_num": 1}, None),
    "PostWorkspace": lambda o: ({}, {"name": f"nw{next(_names)}"}),
    "PatchWorkspace": lambda o: ({"id": o.w}, {"name": f"{o.w_name}-renamed"}),
    "SetWorkspacePoolShare": lambda o: ({"workspace_id": o.w, "resource_pool": "fair"}, {"weight": 2.0}),
    "DeleteWorkspacePoolShare": lambda o: ({"workspace_id": o.w, "resource_pool": "fair"}, None),
    "ArchiveWorkspace": lambda o: ({"id": o.w}, None),
    "UnarchiveWorkspace": lambda o: ({"id": o.w}, None),
    "DeleteWorkspace": lambda o: ({"id": o.w}, None),
    "PostProject": lambda o: ({"workspace_id": o.w}, {"name": f"np{next(_names)}", "workspaceId": o.w}),
    "PatchProject": lambda o: ({"id": o.project}, {"description": "changed"}),
    "ArchiveProject": lambda o: ({"id": o.project}, None),
    "UnarchiveProject": lambda o: ({"id": o.project}, None),
    "DeleteProject": lambda o: ({"id": o.destination}, None),
    "PutProjectNotes": lambda o: (
        {"project_id": o.project},
        {"notes": [{"name": "n", "contents": "c"}], "projectId": o.project},
    ),
    "AddProjectNote": lambda o: ({"project_id": o.project}, {"name": "n", "contents": "c"}),
    "MoveExperiment": lambda o: ({"experiment_id": o.experiment}, {"destinationProjectId": o.destination}),
    "PostTemplate": lambda o: (
        {"template.name": f"nt{next(_names)}"},
        {"config": {"description": "x"}, "workspaceId": o.w},
    ),
    "PutTemplate": lambda o: ({"template.name": o.template}, {"config": {"description": "y"}}),
    "PatchTemplateConfig": lambda o: ({"template_name": o.template}, {"description": "z"}),
    "PatchTemplateName": lambda o: ({}, {"oldName": o.template, "newName": f"{o.template}-renamed"}),
    "DeleteTemplate": lambda o: ({"template_name": o.template}, None),
    "PostWebhook": lambda o: (
        {},
        {
            "url": "http://127.0.0.1:9/other",
            "name": f"nh{next(_names)}",
            "webhookType": "WEBHOOK_TYPE_DEFAULT",
            "triggers": [{"triggerType": "TRIGGER_TYPE_CUSTOM"}],
            "workspaceId": o.w,
            "mode": "WEBHOOK_MODE_WORKSPACE",
        },
    ),
    "PatchWebhook": lambda o: ({"id": o.webhook}, {"url": "http://127.0.0.1:9/patched"}),
    "DeleteWebhook": lambda o: ({"id": o.webhook}, None),
    "TestWebhook": lambda o: ({"id": o.webhook}, None),
    "PostWebhookEventData": lambda o: ({}, {"data": {"title": "t"}, "experimentId": o.experiment}),
    "DeleteTensorboardFiles": lambda o: ({"experiment_id": o.experiment}, None),
    "ContinueExperiment": lambda o: ({}, {"id": o.experiment}),
    "SetClusterMessage": lambda o: ({}, {"message": "hello", "duration": "1h"}),
    "DeleteClusterMessage": lambda o: ({}, None),
    "ReportTrialTrainingMetrics": lambda o: ({"training_metrics.trial_id": o.trial}, _METRICS),
    "ReportTrialValidationMetrics": lambda o: ({"validation_metrics.trial_id": o.trial}, _METRICS),
    "CreateGroup": lambda o: ({}, {"name": f"ng{next(_names)}"}),
    "GetGroups": lambda o: ({}, {"limit": 10}),
    "UpdateGroup": lambda o: ({"group_id": o.group}, {"groupId": o.group, "name": f"renamed{next(_names)}"}),
    "DeleteGroup": lambda o: ({"group_id": o.group}, None),
    "ListRoles": lambda o: ({}, {"limit": 10}),
    "SearchRolesAssignableToScope": lambda o: ({}, {"limit": 10, "workspaceId": o.w}),
    "GetRolesByID": lambda o: ({}, {"roleIds": [4]}),
    "AssignRoles": lambda o: ({}, _user_assignment(o, o.victim, roles.EDITOR.id)),
    "RemoveAssignments": lambda o: ({}, _user_assignment(o, o.victim, roles.VIEWER.id)),
}


def path_of(template: str, params: dict[str, Any]) -> str:
    path = template
    for key, value in params.items():
        path = path.replace("{" + key + "}", str(value))
    assert "{" not in path, f"{template}: a path field is not given ({params})"
    return path


# How an access check words a refusal (identity/access.py), for the calls that answer per id.
REFUSALS = ("belongs to another user", "not found", "may not ", "only an admin")


def _refused_each(body: Any) -> bool:
    """A bulk call answers 200 with each id's result: refused when every id was, for access."""
    results = body.get("results") if isinstance(body, dict) else None
    if not results:
        return False
    return all(any(r in (x.get("error") or "") for r in REFUSALS) for x in results)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    home = tmp_path_factory.mktemp("matrix")
    migrated_sqlite(home / "master" / "master.db")
    base = Master(home / "master", migrated=True)
    base.close()
    master = base.restarted(pools=POOLS)
    try:
        yield World(master)
    finally:
        master.close()


MUTATING = sorted(
    {(b.http_method, b.template, b.rpc.name) for b in http_bindings(SERVICE) if b.http_method != "GET"},
    key=lambda r: r[2],
)


def test_every_call_has_a_decision_and_every_mutating_route_a_request() -> None:
    names = {m.name for m in SERVICE.methods}
    assert sorted(names - set(DECISIONS)) == [], "calls without an access decision (rpc_decisions.py)"
    assert sorted(set(DECISIONS) - names) == [], "decisions for calls that do not exist"
    assert sorted({r[2] for r in MUTATING} - set(RECIPES)) == [], "mutating routes this test cannot drive"


@pytest.mark.parametrize("method,template,rpc", MUTATING, ids=[r[2] for r in MUTATING])
def test_a_mutating_route_as_each_role(world: World, method: str, template: str, rpc: str) -> None:
    decision = DECISIONS[rpc]
    # Refusals first (they change nothing), then the allowed, each on fresh objects.
    order = sorted(USERS, key=lambda u: expected_allowed(decision, u))
    wrong: list[str] = []
    for user in order:
        params, body = RECIPES[rpc](world.objects)
        answer = world.api.call(method, path_of(template, params), body, world.tokens[user])
        refused = answer.status in (403, 404) or _refused_each(answer.body)
        if refused == expected_allowed(decision, user) or answer.status == 401:
            wrong.append(f"{user}: {answer.status} {answer.error}")
        if 200 <= answer.status < 300:
            world.objects = Objects(world)
        if rpc == "Logout":
            world.login()
    assert not wrong, f"{method} {template} ({decision}):\n" + "\n".join(wrong)
