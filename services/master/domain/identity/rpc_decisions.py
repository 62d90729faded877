"""What each call of the public API takes: the one table every call of cairn.api.v1.Cairn is
decided by (its REST route comes from the same RPC), as data. A call the table does not name is
refused (access.check_call), so a new RPC cannot go out without a decision; the route matrix test
(tests/unit/master/test_master_route_matrix.py) drives every mutating route as each role and
holds the table and the checks made deeper in the domain to the same answer.

The kinds:
- PUBLIC: no credentials needed (logging in, what the master is).
- USER: any logged-in user; nothing further (their own session, role definitions, agents).
- READ: any logged-in user; what they see is filtered to the workspaces where they hold
  `permission` (access.readable_workspaces), and one object elsewhere is not found.
- WORKSPACE: `permission` on the workspace of the object the call names (and `also` there); a
  caller who holds it on no workspace at all is refused before the object is looked up. With
  `others`, changing another user's object also takes `others` there (access.check_change).
- CLUSTER: `permission` cluster-wide.
- SELF: the caller's own account, or `permission` cluster-wide for another's.
- TRIAL_CODE: only an allocation's own code (its allocation token) or the cluster itself;
  every user is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from services.master.domain.identity.permissions import Permission

P = Permission


class Kind(Enum):
    PUBLIC = "public"
    USER = "user"
    READ = "read"
    WORKSPACE = "workspace"
    CLUSTER = "cluster"
    SELF = "self"
    TRIAL_CODE = "trial code"


@dataclass(frozen=True)
class Decision:
    kind: Kind
    permission: Permission | None = None
    # Also taken on the same workspace (a move's destination, a TensorBoard's experiments).
    also: tuple[Permission, ...] = ()
    # Another user's object also takes this there (None: whoever owns it).
    others: Permission | None = None


def public() -> Decision:
    return Decision(Kind.PUBLIC)


def user() -> Decision:
    return Decision(Kind.USER)


def read(permission: Permission) -> Decision:
    return Decision(Kind.READ, permission)


def on_workspace(permission: Permission, *also: Permission) -> Decision:
    return Decision(Kind.WORKSPACE, permission, also)


def owned(permission: Permission, *also: Permission, others: Permission = P.CHANGE_OTHERS) -> Decision:
    return Decision(Kind.WORKSPACE, permission, also, others)


def cluster(permission: Permission) -> Decision:
    return Decision(Kind.CLUSTER, permission)


def own_or(permission: Permission) -> Decision:
    return Decision(Kind.SELF, permission)


def trial_code() -> Decision:
    return Decision(Kind.TRIAL_CODE)


_EXP_READ = read(P.VIEW_EXPERIMENT_METADATA)
_ARTIFACTS = read(P.VIEW_EXPERIMENT_ARTIFACTS)
_EXP_CHANGE = owned(P.UPDATE_EXPERIMENT)
_EXP_META = owned(P.UPDATE_EXPERIMENT_METADATA)
_EXP_DELETE = owned(P.DELETE_EXPERIMENT)
_EXP_MOVE = owned(P.UPDATE_EXPERIMENT, P.CREATE_EXPERIMENT)
_NSC_READ = read(P.VIEW_NSC)
_NSC_LAUNCH = on_workspace(P.CREATE_NSC)
_NSC_CHANGE = owned(P.UPDATE_NSC)
_MODELS = read(P.VIEW_MODEL_REGISTRY)
_MODEL_EDIT = owned(P.EDIT_MODEL_REGISTRY)

DECISIONS: dict[str, Decision] = {
    # Runs (trials) and bulk actions on experiments.
    "SearchRuns": _EXP_READ,
    "KillRuns": _EXP_CHANGE,
    "PauseRuns": _EXP_CHANGE,
    "ResumeRuns": _EXP_CHANGE,
    "MoveRuns": _EXP_MOVE,
    "ArchiveRuns": _EXP_META,
    "UnarchiveRuns": _EXP_META,
    "DeleteRuns": _EXP_DELETE,
    "GetRunMetadata": _EXP_READ,
    "PostRunMetadata": _EXP_META,
    "KillExperiments": _EXP_CHANGE,
    "PauseExperiments": _EXP_CHANGE,
    "ActivateExperiments": _EXP_CHANGE,
    "CancelExperiments": _EXP_CHANGE,
    "ArchiveExperiments": _EXP_META,
    "UnarchiveExperiments": _EXP_META,
    "DeleteExperiments": _EXP_DELETE,
    "MoveExperiments": _EXP_MOVE,
    "SearchExperiments": _EXP_READ,
    "GetProjectColumns": read(P.VIEW_PROJECT),
    # Sessions and users.
    "Login": public(),
    "Logout": user(),
    "GetMe": user(),
    "CurrentUser": user(),
    "GetUsers": user(),
    "GetUser": user(),
    "GetUserByUsername": user(),
    "PostUser": cluster(P.ADMINISTRATE_USER),
    "PatchUser": own_or(P.ADMINISTRATE_USER),
    "SetUserPassword": own_or(P.ADMINISTRATE_USER),
    "GetMaster": public(),
    # Experiments.
    "CreateExperiment": on_workspace(P.CREATE_EXPERIMENT),
    "PutExperiment": on_workspace(P.CREATE_EXPERIMENT),
    "GetExperiment": _EXP_READ,
    "GetExperiments": _EXP_READ,
    "ActivateExperiment": _EXP_CHANGE,
    "PauseExperiment": _EXP_CHANGE,
    "CancelExperiment": _EXP_CHANGE,
    "KillExperiment": _EXP_CHANGE,
    "PatchExperiment": _EXP_META,
    "ArchiveExperiment": _EXP_META,
    "UnarchiveExperiment": _EXP_META,
    "DeleteExperiment": _EXP_DELETE,
    "GetExperimentTrials": _EXP_READ,
    "GetExperimentCheckpoints": _ARTIFACTS,
    "GetModelDef": _ARTIFACTS,
    "GetExperimentLabels": _EXP_READ,
    "GetBestSearcherValidationMetric": _EXP_READ,
    "PreviewHPSearch": user(),
    "ContinueExperiment": _EXP_CHANGE,
    "DeleteTensorboardFiles": _EXP_DELETE,
    # Trials, their reports (trial code, or an unmanaged run's code holding a user's session).
    "GetTrial": _EXP_READ,
    "CreateTrial": _EXP_CHANGE,
    "PutTrial": _EXP_CHANGE,
    "PatchTrial": _EXP_CHANGE,
    "StartTrial": _EXP_CHANGE,
    "ShipTaskLogs": _EXP_CHANGE,
    "KillTrial": _EXP_CHANGE,
    "TaskLogs": _NSC_READ,
    "TrialLogs": _EXP_READ,
    "GetTrialProfilerMetrics": _EXP_READ,
    "GetTrialProfilerAvailableSeries": _EXP_READ,
    "GetTaskSystemMetrics": _NSC_READ,
    "GetTrialCheckpoints": _ARTIFACTS,
    "ReportTrialMetrics": _EXP_CHANGE,
    "ReportTrialMetricsBatch": _EXP_CHANGE,
    "ReportTrialTrainingMetrics": _EXP_CHANGE,
    "ReportTrialValidationMetrics": _EXP_CHANGE,
    "GetMetrics": _EXP_READ,
    "GetTrainingMetrics": _EXP_READ,
    "GetValidationMetrics": _EXP_READ,
    "GetTrialWorkloads": _EXP_READ,
    "RunPrepareForReporting": _EXP_CHANGE,
    "TrialsSample": _EXP_READ,
    "CompareTrials": _EXP_READ,
    "TaskLogsFields": _NSC_READ,
    "TrialLogsFields": _EXP_READ,
    "ReportTrialProgress": _EXP_CHANGE,
    "PostTrialRunnerMetadata": _EXP_CHANGE,
    "ReportTrialSearcherEarlyExit": _EXP_CHANGE,
    "GetCurrentTrialSearcherOperation": _EXP_READ,
    "CompleteTrialSearcherValidation": _EXP_CHANGE,
    # Checkpoints.
    "ReportCheckpoint": _EXP_CHANGE,
    "GetCheckpoint": _ARTIFACTS,
    "DeleteCheckpoints": _EXP_DELETE,
    "PatchCheckpoints": _EXP_CHANGE,
    "CheckpointsRemoveFiles": _EXP_DELETE,
    "DownloadCheckpoint": _ARTIFACTS,
    # Agents, pools, the job queue, cluster usage.
    "GetAgents": user(),
    "GetAgent": user(),
    "GetSlots": user(),
    "GetSlot": user(),
    "EnableAgent": cluster(P.UPDATE_AGENTS),
    "DisableAgent": cluster(P.UPDATE_AGENTS),
    "EnableSlot": cluster(P.UPDATE_AGENTS),
    "DisableSlot": cluster(P.UPDATE_AGENTS),
    "GetResourcePools": user(),
    "BindRPToWorkspace": cluster(P.MODIFY_RP_WORKSPACE_BINDINGS),
    "OverwriteRPWorkspaceBindings": cluster(P.MODIFY_RP_WORKSPACE_BINDINGS),
    "UnbindRPFromWorkspace": cluster(P.MODIFY_RP_WORKSPACE_BINDINGS),
    "ListWorkspacesBoundToRP": user(),
    "GetResourcePoolShares": user(),
    "ListRPsBoundToWorkspace": read(P.VIEW_WORKSPACE),
    "GetJobsV2": _EXP_READ,
    "UpdateJobQueue": _EXP_CHANGE,
    "ResourceAllocationRaw": user(),
    "ResourceAllocationAggregated": user(),
    "ResourceAllocationRawCsv": user(),
    "ResourceAllocationAggregatedCsv": user(),
    "AllocationsCsv": user(),
    # Tasks that are not trials, and allocations' signals.
    "GetTasks": _NSC_READ,
    "GetTask": _NSC_READ,
    "AllocationPreemptionSignal": _EXP_READ,
    "WatchAllocationSignals": _EXP_READ,
    "AckAllocationPreemptionSignal": _EXP_CHANGE,
    "NotifyAllocationExiting": trial_code(),
    "AllocationReady": trial_code(),
    "IdleNotebook": trial_code(),
    "LaunchNotebook": _NSC_LAUNCH,
    "KillNotebook": _NSC_CHANGE,
    "SetNotebookPriority": _NSC_CHANGE,
    "GetNotebooks": _NSC_READ,
    "GetNotebook": _NSC_READ,
    "LaunchTensorboard": on_workspace(P.CREATE_NSC, P.VIEW_EXPERIMENT_ARTIFACTS),
    "KillTensorboard": _NSC_CHANGE,
    "SetTensorboardPriority": _NSC_CHANGE,
    "GetTensorboards": _NSC_READ,
    "GetTensorboard": _NSC_READ,
    "LaunchShell": _NSC_LAUNCH,
    "KillShell": _NSC_CHANGE,
    "SetShellPriority": _NSC_CHANGE,
    "GetShells": _NSC_READ,
    "GetShell": _NSC_READ,
    "LaunchCommand": _NSC_LAUNCH,
    "KillCommand": _NSC_CHANGE,
    "SetCommandPriority": _NSC_CHANGE,
    "GetCommands": _NSC_READ,
    "GetCommand": _NSC_READ,
    "CreateGenericTask": _NSC_LAUNCH,
    "KillGenericTask": _NSC_CHANGE,
    "PauseGenericTask": _NSC_CHANGE,
    "UnpauseGenericTask": _NSC_CHANGE,
    "GetGenericTaskConfig": _NSC_READ,
    # The model registry.
    "GetModels": _MODELS,
    "GetModel": _MODELS,
    "GetModelVersions": _MODELS,
    "GetModelVersion": _MODELS,
    "GetModelLabels": _MODELS,
    "PostModel": on_workspace(P.CREATE_MODEL_REGISTRY),
    "PatchModel": _MODEL_EDIT,
    "ArchiveModel": _MODEL_EDIT,
    "UnarchiveModel": _MODEL_EDIT,
    "DeleteModel": owned(P.DELETE_MODEL_REGISTRY, others=P.DELETE_OTHER_USER_MODEL_REGISTRY),
    "PostModelVersion": owned(P.EDIT_MODEL_REGISTRY, P.VIEW_EXPERIMENT_ARTIFACTS),
    "PatchModelVersion": _MODEL_EDIT,
    "DeleteModelVersion": owned(P.DELETE_MODEL_VERSION, others=P.DELETE_OTHER_USER_MODEL_VERSION),
    # Workspaces and projects.
    "GetWorkspaces": read(P.VIEW_WORKSPACE),
    "GetWorkspace": read(P.VIEW_WORKSPACE),
    "PostWorkspace": cluster(P.CREATE_WORKSPACE),
    "PatchWorkspace": owned(P.UPDATE_WORKSPACE),
    "ArchiveWorkspace": owned(P.UPDATE_WORKSPACE),
    "UnarchiveWorkspace": owned(P.UPDATE_WORKSPACE),
    "DeleteWorkspace": owned(P.DELETE_WORKSPACE),
    "GetWorkspacePoolShares": read(P.VIEW_WORKSPACE),
    "SetWorkspacePoolShare": cluster(P.SET_RESOURCE_QUOTAS),
    "DeleteWorkspacePoolShare": cluster(P.SET_RESOURCE_QUOTAS),
    "GetWorkspaceProjects": read(P.VIEW_PROJECT),
    "PostProject": on_workspace(P.CREATE_PROJECT),
    "GetProject": read(P.VIEW_PROJECT),
    "PatchProject": owned(P.UPDATE_PROJECT),
    "ArchiveProject": owned(P.UPDATE_PROJECT),
    "UnarchiveProject": owned(P.UPDATE_PROJECT),
    "DeleteProject": owned(P.DELETE_PROJECT),
    "PutProjectNotes": on_workspace(P.UPDATE_PROJECT),
    "AddProjectNote": on_workspace(P.UPDATE_PROJECT),
    "MoveExperiment": _EXP_MOVE,
    # Templates.
    "GetTemplates": read(P.VIEW_TEMPLATES),
    "GetTemplate": read(P.VIEW_TEMPLATES),
    "PostTemplate": on_workspace(P.CREATE_TEMPLATES),
    "PutTemplate": owned(P.UPDATE_TEMPLATES),
    "PatchTemplateConfig": owned(P.UPDATE_TEMPLATES),
    "PatchTemplateName": owned(P.UPDATE_TEMPLATES),
    "DeleteTemplate": owned(P.DELETE_TEMPLATES),
    # Webhooks: a workspace's are its admins' (their URLs are its secrets); global ones the cluster's.
    "GetWebhooks": read(P.VIEW_WEBHOOKS),
    "PostWebhook": owned(P.EDIT_WEBHOOKS),
    "PatchWebhook": owned(P.EDIT_WEBHOOKS),
    "DeleteWebhook": owned(P.EDIT_WEBHOOKS),
    "TestWebhook": owned(P.EDIT_WEBHOOKS),
    "PostWebhookEventData": _EXP_CHANGE,
    # The master.
    "GetMasterConfig": cluster(P.VIEW_MASTER_CONFIG),
    # Every user reads the master's log, as before roles (Determined's RBAC keeps it to
    # ClusterAdmin: VIEW_MASTER_LOGS).
    "MasterLogs": user(),
    "GetClusterMessage": cluster(P.VIEW_MASTER_CONFIG),
    "SetClusterMessage": cluster(P.UPDATE_MASTER_CONFIG),
    "DeleteClusterMessage": cluster(P.UPDATE_MASTER_CONFIG),
    # Groups and roles.
    "CreateGroup": cluster(P.UPDATE_GROUP),
    "GetGroups": user(),
    "GetGroup": user(),
    "UpdateGroup": cluster(P.UPDATE_GROUP),
    "DeleteGroup": cluster(P.UPDATE_GROUP),
    "GetPermissionsSummary": user(),
    "ListRoles": user(),
    "SearchRolesAssignableToScope": user(),
    "GetRolesByID": user(),
    "GetRolesAssignedToUser": user(),
    "GetRolesAssignedToGroup": user(),
    "GetGroupsAndUsersAssignedToWorkspace": read(P.VIEW_WORKSPACE),
    "AssignRoles": on_workspace(P.ASSIGN_ROLES),
    "RemoveAssignments": on_workspace(P.ASSIGN_ROLES),
    # Access tokens: one's own, or anyone's with Determined's token permissions (ClusterAdmin);
    # a listing shows others' only to VIEW_OTHER_TOKEN (access.sees_every_token).
    "PostAccessToken": own_or(P.ADMINISTRATE_TOKEN),
    "GetAccessTokens": user(),
    "PatchAccessToken": own_or(P.ADMINISTRATE_TOKEN),
    # Agents' credentials: who may let agents join, shut one out, or see the credentials.
    "CreateAgentJoinToken": cluster(P.UPDATE_AGENTS),
    "GetAgentJoinTokens": cluster(P.UPDATE_AGENTS),
    "RotateAgentEnrolmentSecret": cluster(P.UPDATE_AGENTS),
    "GetAgentCredentials": cluster(P.VIEW_SENSITIVE_AGENT_INFO),
    "RevokeAgent": cluster(P.UPDATE_AGENTS),
    # The audit trail is the master's record of everyone's calls: read as its logs are in
    # Determined's RBAC (VIEW_MASTER_LOGS: ClusterAdmin).
    "GetAuditEvents": cluster(P.VIEW_MASTER_LOGS),
}
