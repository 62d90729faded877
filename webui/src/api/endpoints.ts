// One function per REST call the WebUI makes; paths and parameters are the google.api.http rules
// of proto/cairn/api/v1/api.proto, with query parameters in their JSON (lowerCamelCase) names.

import { ApiError, buildUrl, del, get, patch, post, put, stream } from "./http";
import type {
  AllocationSummary,
  GetAuditEventsResponse,
  CommandLike,
  GetAgentsResponse,
  GetTasksResponse,
  GetTaskSystemMetricsResponse,
  TaskDetail,
  GetCheckpointsResponse,
  GetExperimentResponse,
  GetExperimentsResponse,
  GetExperimentTrialsResponse,
  GetMetricsResponse,
  GetModelsResponse,
  GetModelVersionsResponse,
  ExperimentPatch,
  Experiment,
  Model,
  ModelVersion,
  Project,
  Workspace,
  GetResourcePoolsResponse,
  GetResourcePoolSharesResponse,
  GetJobsV2Response,
  PoolShare,
  PoolShareSetting,
  UserSummary,
  LoginResponse,
  MasterInfo,
  Trial,
  TrialLogLine,
  TrialsSampleResponse,
  User,
} from "./types";

export const login = (username: string, hashedPassword: string) =>
  post<LoginResponse>("/api/v1/auth/login", { username, password: hashedPassword, isHashed: true });

export const logout = () => post<object>("/api/v1/auth/logout");

/** The master's info (answered without credentials), with the cluster message while it shows. */
export const getMaster = (signal?: AbortSignal) => get<MasterInfo>("/api/v1/master", undefined, signal);

export const getMe = (signal?: AbortSignal) => get<{ user: User }>("/api/v1/me", undefined, signal);

// The roles the caller holds and where (Determined's GetPermissionsSummary): what the views that
// only some may use ask, so the WebUI shows what the master would allow (it decides anyway).
export interface PermissionsSummary {
  roles?: { roleId: number; permissions?: { id: string }[] }[];
  assignments?: { roleId: number; scopeCluster?: boolean; scopeWorkspaceIds?: number[] }[];
}
export const getPermissionsSummary = (signal?: AbortSignal) =>
  get<PermissionsSummary>("/api/v1/permissions/summary", undefined, signal);

/** The permissions (Determined's names, "PERMISSION_TYPE_...") held cluster-wide. */
export function clusterPermissions(summary: PermissionsSummary): Set<string> {
  const byRole = new Map((summary.roles ?? []).map((r) => [r.roleId, r.permissions ?? []]));
  const held = new Set<string>();
  for (const a of summary.assignments ?? []) {
    if (!a.scopeCluster) continue;
    for (const p of byRole.get(a.roleId) ?? []) held.add(p.id);
  }
  return held;
}

export interface ExperimentsQuery {
  sortBy: string;
  orderBy: "ORDER_BY_ASC" | "ORDER_BY_DESC";
  offset: number;
  limit: number;
  states: string[];
  archived?: boolean;
  name?: string;
  projectId?: number;
}

export const getExperiments = (q: ExperimentsQuery, signal?: AbortSignal) =>
  get<GetExperimentsResponse>("/api/v1/experiments", { ...q }, signal);

export const getExperiment = (id: number, signal?: AbortSignal) =>
  get<GetExperimentResponse>(`/api/v1/experiments/${id}`, undefined, signal);

export const patchExperiment = (id: number, fields: ExperimentPatch) =>
  patch<{ experiment: Experiment }>(`/api/v1/experiments/${id}`, { id, ...fields });

/** Determined's fork: a new experiment with the parent's model definition and a new config. */
export const forkExperiment = (parentId: number, config: string) =>
  post<{ experiment: Experiment }>("/api/v1/experiments", { parentId, config, activate: true });

/** Determined's continue: the single trial resumes from its latest checkpoint, config overridden. */
export const continueExperiment = (id: number, overrideConfig: string) =>
  post<{ experiment: Experiment }>("/api/v1/experiments/continue", { id, overrideConfig });

export const getWorkspaces = (signal?: AbortSignal) =>
  get<{ workspaces: Workspace[] }>("/api/v1/workspaces", { limit: 100, archived: false }, signal);

export const getWorkspaceProjects = (workspaceId: number, signal?: AbortSignal) =>
  get<{ projects: Project[] }>(`/api/v1/workspaces/${workspaceId}/projects`, { limit: 100, archived: false }, signal);

export interface ModelsQuery {
  sortBy: string;
  orderBy: "ORDER_BY_ASC" | "ORDER_BY_DESC";
  offset: number;
  limit: number;
  archived?: boolean;
  name?: string;
}

export const getModels = (q: ModelsQuery, signal?: AbortSignal) => get<GetModelsResponse>("/api/v1/models", { ...q }, signal);

export const getModelVersions = (name: string, signal?: AbortSignal) =>
  get<GetModelVersionsResponse>(
    `/api/v1/models/${encodeURIComponent(name)}/versions`,
    { sortBy: "SORT_BY_VERSION", orderBy: "ORDER_BY_DESC", limit: 100 },
    signal,
  );

export const createModel = (name: string, description: string) =>
  post<{ model: Model }>("/api/v1/models", { name, description });

export const registerModelVersion = (modelName: string, checkpointUuid: string) =>
  post<{ modelVersion: ModelVersion }>(`/api/v1/models/${encodeURIComponent(modelName)}/versions`, {
    modelName,
    checkpointUuid,
  });

export type ExperimentAction = "activate" | "pause" | "cancel" | "kill" | "archive" | "unarchive";

export const experimentAction = (id: number, action: ExperimentAction) =>
  post<object>(`/api/v1/experiments/${id}/${action}`);

export const getExperimentTrials = (id: number, signal?: AbortSignal) =>
  get<GetExperimentTrialsResponse>(`/api/v1/experiments/${id}/trials`, { limit: -1 }, signal);

export interface CheckpointsQuery {
  sortByAttr: string;
  orderBy: "ORDER_BY_ASC" | "ORDER_BY_DESC";
  offset: number;
  limit: number;
}

export const getExperimentCheckpoints = (id: number, q: CheckpointsQuery, signal?: AbortSignal) =>
  get<GetCheckpointsResponse>(`/api/v1/experiments/${id}/checkpoints`, { ...q }, signal);

export const getTrial = (id: number, signal?: AbortSignal) =>
  get<{ trial: Trial }>(`/api/v1/trials/${id}`, undefined, signal);

export const getTrialCheckpoints = (id: number, signal?: AbortSignal) =>
  get<GetCheckpointsResponse>(
    `/api/v1/trials/${id}/checkpoints`,
    { sortByAttr: "SORT_BY_BATCH_NUMBER", orderBy: "ORDER_BY_DESC", limit: -1 },
    signal,
  );

/** Every stored report of one group of a trial, downsampled by the master to maxDatapoints. */
export async function getTrialMetrics(
  trialId: number,
  group: string,
  maxDatapoints: number,
  signal: AbortSignal,
) {
  const reports: GetMetricsResponse["metrics"] = [];
  await stream<GetMetricsResponse>(
    "/api/v1/trials/metrics/trial_metrics",
    { trialIds: [trialId], group, maxDatapoints },
    (message) => reports.push(...(message.metrics ?? [])),
    signal,
  );
  return reports;
}

export interface SampleQuery {
  metricName: string;
  group: string;
  maxTrials: number;
  maxDatapoints: number;
  periodSeconds: number;
}

export const streamTrialsSample = (
  experimentId: number,
  q: SampleQuery,
  onMessage: (m: TrialsSampleResponse) => void,
  signal: AbortSignal,
) =>
  stream<TrialsSampleResponse>(
    `/api/v1/experiments/${experimentId}/metrics-stream/trials-sample`,
    { ...q },
    onMessage,
    signal,
  );

/** A trial's log lines; with `rankIds`, only the lines launchers tagged with those ranks. */
export const streamTrialLogs = (
  trialId: number,
  follow: boolean,
  onLine: (line: TrialLogLine) => void,
  signal: AbortSignal,
  rankIds: number[] = [],
) => stream<TrialLogLine>(`/api/v1/trials/${trialId}/logs`, { follow, rank_ids: rankIds }, onLine, signal);

export const getAgents = (signal?: AbortSignal) =>
  get<GetAgentsResponse>("/api/v1/agents", { sortBy: "SORT_BY_ID", limit: -1 }, signal);

export const getResourcePools = (signal?: AbortSignal) =>
  get<GetResourcePoolsResponse>("/api/v1/resource-pools", { limit: -1 }, signal);

// ---- tasks that are not trials ----

/** The kinds the tasks page lists; each has its own listing and kill route, as in Determined. */
export type TaskKind = "command" | "notebook" | "shell" | "tensorboard" | "generic";

const KIND_ROUTES: Record<Exclude<TaskKind, "generic">, { path: string; key: string }> = {
  command: { path: "/api/v1/commands", key: "commands" },
  notebook: { path: "/api/v1/notebooks", key: "notebooks" },
  shell: { path: "/api/v1/shells", key: "shells" },
  tensorboard: { path: "/api/v1/tensorboards", key: "tensorboards" },
};

/**
 * Every task of one kind, newest first. A master that does not serve the kind (404: no route;
 * 501: the route without its implementation yet) lists none of it rather than failing the page.
 */
export async function getTasksOfKind(kind: Exclude<TaskKind, "generic">, signal?: AbortSignal): Promise<CommandLike[]> {
  const route = KIND_ROUTES[kind];
  try {
    const response = await get<Record<string, CommandLike[] | undefined>>(
      route.path,
      { sortBy: "SORT_BY_START_TIME", orderBy: "ORDER_BY_DESC" },
      signal,
    );
    return response[route.key] ?? [];
  } catch (error) {
    if (error instanceof ApiError && (error.status === 404 || error.status === 501)) return [];
    throw error;
  }
}

/** The live allocations of every kind (Determined's GetTasks, what `det task list` shows). */
export async function getLiveAllocations(signal?: AbortSignal): Promise<AllocationSummary[]> {
  const response = await get<GetTasksResponse>("/api/v1/tasks", undefined, signal);
  return Object.values(response.allocationIdToSummary ?? {});
}

export const getTask = (taskId: string, signal?: AbortSignal) =>
  get<{ task: TaskDetail }>(`/api/v1/tasks/${encodeURIComponent(taskId)}`, undefined, signal);

/** What a task's containers cost the machine, as series (the agents sample every 10 s by default). */
export const getTaskSystemMetrics = (taskId: string, afterId: string, signal?: AbortSignal) =>
  get<GetTaskSystemMetricsResponse>(
    `/api/v1/tasks/${encodeURIComponent(taskId)}/system-metrics`,
    afterId !== "0" ? { afterId } : undefined,
    signal,
  );

export function killTask(kind: TaskKind, taskId: string): Promise<object> {
  const id = encodeURIComponent(taskId);
  if (kind === "generic") return post<object>(`/api/v1/tasks/${id}/kill`, { taskId });
  return post<object>(`${KIND_ROUTES[kind].path}/${id}/kill`);
}

/** Determined's WebUI launch: a notebook config of slots and pool; JupyterLab is the entrypoint. */
export const launchNotebook = (slots: number, resourcePool: string, description: string) =>
  post<{ notebook: CommandLike }>("/api/v1/notebooks", {
    config: {
      resources: { slots, ...(resourcePool ? { resource_pool: resourcePool } : {}) },
      ...(description ? { description } : {}),
    },
  });

/** A TensorBoard of these experiments' metrics, served through the master's proxy. */
export const launchTensorboard = (experimentIds: number[]) =>
  post<{ tensorboard: CommandLike }>("/api/v1/tensorboards", { experimentIds });

// ---- how teams share the cluster: fair-share divisions, quotas, bound pools, the queue ----

const poolPath = (pool: string) => `/api/v1/resource-pools/${encodeURIComponent(pool)}`;

/** How a fair-share pool is divided among workspaces and their users (empty lists otherwise). */
export const getPoolShares = (pool: string, signal?: AbortSignal) =>
  get<GetResourcePoolSharesResponse>(`${poolPath(pool)}/shares`, undefined, signal);

/** The workspaces a pool is bound to (none: the pool is shared by the whole cluster). */
export const getPoolBindings = (pool: string, signal?: AbortSignal) =>
  get<{ workspaceIds?: number[] }>(`${poolPath(pool)}/workspace-bindings`, { limit: -1 }, signal);

/** Binds the pool to exactly these workspaces (none: shared by the cluster again); admins only. */
export const replacePoolBindings = (pool: string, workspaceIds: number[]) =>
  put<object>(`${poolPath(pool)}/workspace-bindings`, { resourcePoolName: pool, workspaceIds });

export const getWorkspace = (id: number, signal?: AbortSignal) =>
  get<{ workspace: Workspace }>(`/api/v1/workspaces/${id}`, undefined, signal);

/** The pools a workspace may use: every unbound pool and those bound to it. */
export const getWorkspacePools = (workspaceId: number, signal?: AbortSignal) =>
  get<{ resourcePools?: string[] }>(`/api/v1/workspaces/${workspaceId}/available-resource-pools`, { limit: -1 }, signal);

/** A workspace's weight and quota in every fair-share pool, then its users' set ones. */
export const getWorkspacePoolShares = (workspaceId: number, signal?: AbortSignal) =>
  get<{ shares?: PoolShare[] }>(`/api/v1/workspaces/${workspaceId}/pool-shares`, undefined, signal);

export const setWorkspacePoolShare = (workspaceId: number, pool: string, setting: PoolShareSetting) =>
  put<object>(`/api/v1/workspaces/${workspaceId}/pool-shares/${encodeURIComponent(pool)}`, {
    workspaceId,
    resourcePool: pool,
    ...setting,
  });

/** Back to weight 1 and no quota. */
export const clearWorkspacePoolShare = (workspaceId: number, pool: string, userId: number) =>
  del<object>(
    buildUrl(`/api/v1/workspaces/${workspaceId}/pool-shares/${encodeURIComponent(pool)}`, { userId }),
  );

export const getUsers = (signal?: AbortSignal) =>
  get<{ users?: UserSummary[] }>("/api/v1/users", { limit: 100 }, signal);

/** One pool's jobs in queue order, each with why it waits and when it is forecast to start. */
export const getPoolQueue = (pool: string, signal?: AbortSignal) =>
  get<GetJobsV2Response>("/api/v1/job-queues-v2", { resourcePool: pool, limit: -1 }, signal);

export interface AuditQuery {
  username?: string;
  since?: string; // RFC 3339
  until?: string;
  method?: string;
  outcome?: string;
  target?: string;
  limit: number;
  beforeId?: string;
}

/** The audit trail, newest first (admins only): a page, and where the next (older) one starts. */
export const getAuditEvents = (q: AuditQuery, signal?: AbortSignal) =>
  get<GetAuditEventsResponse>("/api/v1/audit", { ...q }, signal);
