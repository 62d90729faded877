"""Determined's permissions, by its ids and names (the 0.38 clients show them so: `det rbac
list-roles`, `det rbac my-permissions`). The domain's own copy of proto/cairn/api/v1/rbac.proto's
PermissionType: the domain knows no gRPC; servicers/api/rbac.py converts by number.

Ids of the form 9xxxx are cluster-wide only (Determined's rule): a role that holds one cannot be
assigned on a workspace.
"""

from __future__ import annotations

from enum import IntEnum


class Permission(IntEnum):
    ADMINISTRATE_USER = 91001
    ADMINISTRATE_OAUTH = 91002
    CREATE_EXPERIMENT = 2001
    VIEW_EXPERIMENT_ARTIFACTS = 2002
    VIEW_EXPERIMENT_METADATA = 2003
    UPDATE_EXPERIMENT = 2004
    UPDATE_EXPERIMENT_METADATA = 2005
    DELETE_EXPERIMENT = 2006
    CREATE_NSC = 3001
    VIEW_NSC = 3002
    UPDATE_NSC = 3003
    UPDATE_GROUP = 93001
    CREATE_WORKSPACE = 94001
    VIEW_WORKSPACE = 4002
    UPDATE_WORKSPACE = 4003
    DELETE_WORKSPACE = 4004
    SET_WORKSPACE_AGENT_USER_GROUP = 4005
    SET_WORKSPACE_CHECKPOINT_STORAGE_CONFIG = 4006
    SET_WORKSPACE_DEFAULT_RESOURCE_POOL = 4007
    CREATE_PROJECT = 5001
    VIEW_PROJECT = 5002
    UPDATE_PROJECT = 5003
    DELETE_PROJECT = 5004
    ASSIGN_ROLES = 6002
    VIEW_MODEL_REGISTRY = 7001
    EDIT_MODEL_REGISTRY = 7002
    CREATE_MODEL_REGISTRY = 7003
    DELETE_MODEL_REGISTRY = 7004
    DELETE_MODEL_VERSION = 7005
    DELETE_OTHER_USER_MODEL_REGISTRY = 7006
    DELETE_OTHER_USER_MODEL_VERSION = 7007
    VIEW_MASTER_LOGS = 8001
    VIEW_CLUSTER_USAGE = 8002
    UPDATE_AGENTS = 8003
    VIEW_SENSITIVE_AGENT_INFO = 8004
    VIEW_MASTER_CONFIG = 8005
    UPDATE_MASTER_CONFIG = 8006
    VIEW_EXTERNAL_JOBS = 8007
    CONTROL_STRICT_JOB_QUEUE = 8008
    VIEW_TEMPLATES = 9001
    UPDATE_TEMPLATES = 9002
    CREATE_TEMPLATES = 9003
    DELETE_TEMPLATES = 9004
    UPDATE_ROLES = 96001
    EDIT_WEBHOOKS = 97001
    VIEW_WEBHOOKS = 97002
    MODIFY_RP_WORKSPACE_BINDINGS = 99001
    SET_WORKSPACE_NAMESPACE_BINDINGS = 11001
    SET_RESOURCE_QUOTAS = 11002
    VIEW_RESOURCE_QUOTAS = 11003
    MODIFY_GLOBAL_CONFIG_POLICIES = 11004
    MODIFY_WORKSPACE_CONFIG_POLICIES = 11005
    VIEW_GLOBAL_CONFIG_POLICIES = 11006
    VIEW_WORKSPACE_CONFIG_POLICIES = 11007
    ADMINISTRATE_TOKEN = 12001
    UPDATE_TOKEN = 12002
    CREATE_TOKEN = 12003
    CREATE_OTHER_TOKEN = 12004
    VIEW_OTHER_TOKEN = 12005
    VIEW_TOKEN = 12006
    # Cairn's own, never sent to a client: change what another user owns in the scope (another
    # user's experiment, task, model, project, template; a workspace's webhooks). Editor lacks it,
    # so an Editor changes its own objects only, as every user did before roles (README "Roles").
    # Determined's DELETE_OTHER_USER_* permissions are this rule for the model registry alone.
    CHANGE_OTHERS = -1


# Determined's wording of each permission, as its clients print it.
NAMES: dict[Permission, str] = {
    Permission.ADMINISTRATE_USER: "administrate user",
    Permission.ADMINISTRATE_OAUTH: "administrate oauth",
    Permission.CREATE_EXPERIMENT: "create experiment",
    Permission.VIEW_EXPERIMENT_ARTIFACTS: "view experiment artifacts",
    Permission.VIEW_EXPERIMENT_METADATA: "view experiment metadata",
    Permission.UPDATE_EXPERIMENT: "update experiment",
    Permission.UPDATE_EXPERIMENT_METADATA: "update experiment metadata",
    Permission.DELETE_EXPERIMENT: "delete experiment",
    Permission.CREATE_NSC: "create notebooks/shells/commands",
    Permission.VIEW_NSC: "view notebooks/shells/commands",
    Permission.UPDATE_NSC: "update notebooks/shells/commands",
    Permission.UPDATE_GROUP: "update group",
    Permission.CREATE_WORKSPACE: "create workspace",
    Permission.VIEW_WORKSPACE: "view workspace",
    Permission.UPDATE_WORKSPACE: "update workspace",
    Permission.DELETE_WORKSPACE: "delete workspace",
    Permission.SET_WORKSPACE_AGENT_USER_GROUP: "set workspace agent user group",
    Permission.SET_WORKSPACE_CHECKPOINT_STORAGE_CONFIG: "set workspace checkpoint storage config",
    Permission.SET_WORKSPACE_DEFAULT_RESOURCE_POOL: "set workspace default resource pool",
    Permission.CREATE_PROJECT: "create project",
    Permission.VIEW_PROJECT: "view project",
    Permission.UPDATE_PROJECT: "update project",
    Permission.DELETE_PROJECT: "delete project",
    Permission.ASSIGN_ROLES: "assign roles",
    Permission.VIEW_MODEL_REGISTRY: "view model registry",
    Permission.EDIT_MODEL_REGISTRY: "edit model registry",
    Permission.CREATE_MODEL_REGISTRY: "create model registry",
    Permission.DELETE_MODEL_REGISTRY: "delete model registry",
    Permission.DELETE_MODEL_VERSION: "delete model version",
    Permission.DELETE_OTHER_USER_MODEL_REGISTRY: "delete other user model registry",
    Permission.DELETE_OTHER_USER_MODEL_VERSION: "delete other user model version",
    Permission.VIEW_MASTER_LOGS: "view master logs",
    Permission.VIEW_CLUSTER_USAGE: "view cluster usage",
    Permission.UPDATE_AGENTS: "update agents",
    Permission.VIEW_SENSITIVE_AGENT_INFO: "view sensitive agent info",
    Permission.VIEW_MASTER_CONFIG: "view master config",
    Permission.UPDATE_MASTER_CONFIG: "update master config",
    Permission.VIEW_EXTERNAL_JOBS: "view external jobs",
    Permission.CONTROL_STRICT_JOB_QUEUE: "control strict job queue",
    Permission.VIEW_TEMPLATES: "view templates",
    Permission.UPDATE_TEMPLATES: "update templates",
    Permission.CREATE_TEMPLATES: "create templates",
    Permission.DELETE_TEMPLATES: "delete templates",
    Permission.UPDATE_ROLES: "update roles",
    Permission.EDIT_WEBHOOKS: "edit webhooks",
    Permission.VIEW_WEBHOOKS: "view webhooks",
    Permission.MODIFY_RP_WORKSPACE_BINDINGS: "modify resource pool workspace bindings",
    Permission.SET_WORKSPACE_NAMESPACE_BINDINGS: "modify workspace-namespace bindings",
    Permission.SET_RESOURCE_QUOTAS: "set resource quotas",
    Permission.VIEW_RESOURCE_QUOTAS: "view resource quotas",
    Permission.MODIFY_GLOBAL_CONFIG_POLICIES: "modify global config policies",
    Permission.MODIFY_WORKSPACE_CONFIG_POLICIES: "modify workspace config policies",
    Permission.VIEW_GLOBAL_CONFIG_POLICIES: "view global config policies",
    Permission.VIEW_WORKSPACE_CONFIG_POLICIES: "view workspace config policies",
    Permission.ADMINISTRATE_TOKEN: "administrate access token",
    Permission.UPDATE_TOKEN: "update own access token",
    Permission.CREATE_TOKEN: "create long lived token",
    Permission.CREATE_OTHER_TOKEN: "create other long lived token",
    Permission.VIEW_OTHER_TOKEN: "view other access token",
    Permission.VIEW_TOKEN: "view own access token",
    Permission.CHANGE_OTHERS: "change other users' objects",
}

# Permissions that only make sense cluster-wide (Determined's 9xxxx ids but webhooks', which
# Determined made workspace-scoped later; and what Cairn keeps to the cluster: agents, the master,
# pools' bindings and shares).
CLUSTER_ONLY: frozenset[Permission] = frozenset(
    p for p in Permission if p >= 90000 and p not in (Permission.EDIT_WEBHOOKS, Permission.VIEW_WEBHOOKS)
) | frozenset(
    {
        Permission.VIEW_MASTER_LOGS,
        Permission.VIEW_CLUSTER_USAGE,
        Permission.UPDATE_AGENTS,
        Permission.VIEW_SENSITIVE_AGENT_INFO,
        Permission.VIEW_MASTER_CONFIG,
        Permission.UPDATE_MASTER_CONFIG,
        Permission.VIEW_EXTERNAL_JOBS,
        Permission.CONTROL_STRICT_JOB_QUEUE,
        Permission.SET_RESOURCE_QUOTAS,
        Permission.MODIFY_GLOBAL_CONFIG_POLICIES,
        Permission.SET_WORKSPACE_NAMESPACE_BINDINGS,
        Permission.ADMINISTRATE_TOKEN,
        Permission.CREATE_OTHER_TOKEN,
        Permission.VIEW_OTHER_TOKEN,
    }
)

# What clients are shown: every permission but Cairn's own.
SHOWN: tuple[Permission, ...] = tuple(p for p in Permission if p > 0)
