// The JSON shapes of Cairn's REST API (proto/cairn/api/v1), as the gateway writes them:
// lowerCamelCase names, enums as their names, int64 as strings, Timestamps as RFC 3339 text,
// doubles that are not finite as "NaN"/"Infinity". Only the fields the WebUI reads are listed;
// proto3 `optional` fields and unset sub-messages may be missing.

export type JsonObject = Record<string, unknown>;
export type Num = number | string; // a double: a number, or "NaN" / "Infinity" / "-Infinity"

export interface User {
  id: number;
  username: string;
  admin: boolean;
  displayName: string;
}

export interface LoginResponse {
  token: string;
  user?: User;
}

export interface Pagination {
  offset: number;
  limit: number;
  startIndex: number;
  endIndex: number;
  total: number;
}

export interface Experiment {
  id: number;
  name: string;
  description: string;
  labels: string[];
  startTime?: string;
  endTime?: string;
  state: string;
  archived: boolean;
  numTrials: number;
  trialIds: number[];
  username: string;
  resourcePool: string;
  searcherType: string;
  searcherMetric: string;
  hyperparameters?: JsonObject;
  progress?: Num;
  checkpointSize: string;
  checkpointCount: number;
  bestTrialSearcherMetric?: Num;
  bestTrialId?: number;
  duration?: number;
  smallerIsBetter: boolean;
  config?: JsonObject;
  originalConfig?: string;
  notes?: string;
  forkedFrom?: number;
  projectId?: number;
  projectName?: string;
  workspaceId?: number;
  workspaceName?: string;
}

/** The fields PatchExperiment changes; a field left out stays as it is. */
export interface ExperimentPatch {
  name?: string;
  description?: string;
  notes?: string;
  labels?: string[];
}

export interface GetExperimentsResponse {
  experiments: Experiment[];
  pagination?: Pagination;
}

export interface GetExperimentResponse {
  experiment: Experiment;
  jobSummary?: { state: string; jobsAhead: number };
  config?: JsonObject;
}

export interface MetricsWorkload {
  endTime?: string;
  metrics?: { avgMetrics?: JsonObject };
  totalBatches: number;
}

export interface Trial {
  id: number;
  experimentId: number;
  startTime?: string;
  endTime?: string;
  state: string;
  restarts: number;
  hparams?: JsonObject;
  totalBatchesProcessed: number;
  bestValidation?: MetricsWorkload;
  latestValidation?: MetricsWorkload;
  bestCheckpoint?: { uuid: string; totalBatches: number; state: string };
  runnerState: string;
  wallClockTime: Num;
  taskId: string;
  totalCheckpointSize: string;
  checkpointCount: number;
  // {avg_metrics: {name: {count, min, max, last, type, ...}}, validation_metrics: {...}, <group>: ...}
  summaryMetrics?: JsonObject;
  searcherMetricValue?: Num;
  allocationId: string;
  runId: number;
  latestCheckpointUuid: string;
}

export interface GetExperimentTrialsResponse {
  trials: Trial[];
  pagination?: Pagination;
}

export interface Checkpoint {
  taskId: string;
  allocationId?: string;
  uuid: string;
  reportTime?: string;
  resources: Record<string, string>;
  metadata?: JsonObject;
  state: string;
  training?: {
    trialId?: number;
    experimentId?: number;
    searcherMetric?: Num;
    validationMetrics?: JsonObject;
  };
}

export interface GetCheckpointsResponse {
  checkpoints: Checkpoint[];
  pagination?: Pagination;
}

export interface MetricsReport {
  trialId: number;
  endTime?: string;
  // {avg_metrics: {...}, batch_metrics: [...]}, as Determined stores a report.
  metrics?: JsonObject;
  totalBatches: number;
  trialRunId: number;
  group: string;
}

export interface GetMetricsResponse {
  metrics: MetricsReport[];
}

export interface DataPoint {
  batches: number;
  value: Num;
  time?: string;
}

export interface TrialsSampleResponse {
  trials: { trialId: number; hparams?: JsonObject; data: DataPoint[] }[];
  promotedTrials: number[];
  demotedTrials: number[];
}

export interface TrialLogLine {
  id: string;
  timestamp?: string;
  message: string;
  level: string;
  trialId: number;
  agentId?: string;
  containerId?: string;
  rankId?: number;
  stdtype?: string;
  allocationId: string;
}

export interface Device {
  id: number;
  brand: string;
  uuid: string;
  type: string;
}

export interface Container {
  parent: string;
  id: string;
  state: string;
  devices: Device[];
}

export interface Slot {
  id: string;
  device?: Device;
  enabled: boolean;
  container?: Container;
  draining: boolean;
  /** Cairn: why the slot is out of service after its device failed; absent or "" when healthy. */
  unhealthy?: string;
}

export interface Agent {
  id: string;
  registeredTime?: string;
  slots: Record<string, Slot>;
  addresses: string[];
  enabled: boolean;
  draining: boolean;
  version: string;
  resourcePools: string[];
  connected: boolean;
  lastHeartbeat?: string;
  hostname: string;
}

export interface GetAgentsResponse {
  agents: Agent[];
}

export interface ResourcePool {
  name: string;
  description: string;
  type: string;
  numAgents: number;
  slotsAvailable: number;
  slotsUsed: number;
  slotType: string;
  schedulerType: string;
  schedulerFittingPolicy: string;
  defaultComputePool: boolean;
  defaultAuxPool: boolean;
  stats?: { queuedCount: number; scheduledCount: number };
  defaultPriority: number;
  preemptionEnabled: boolean;
  /** Set only for a pool whose agents the master provisions (absent for a static pool). */
  provisioner?: ProvisionerStatus;
}

/** An instance a pool's provisioner launched; its id is also its agent's id. */
export interface ProvisionedInstance {
  id: string;
  /** LAUNCHING, STARTING, RUNNING, DRAINING or TERMINATING. */
  phase: string;
  launchedAt?: string;
  connectedAt?: string;
  /** Since when it has run nothing (absent while busy or not yet connected). */
  idleSince?: string;
  drainReason: string;
  /** Why it was launched. */
  reason: string;
}

/** A provisioner decision (launch, drain, terminate, ...) or a provider failure, with its reason. */
export interface ProvisionerEvent {
  at?: string;
  action: string;
  instanceId: string;
  message: string;
}

export interface ProvisionerStatus {
  provider: string;
  minInstances: number;
  maxInstances: number;
  instanceSlots: number;
  maxIdleAgentPeriodS: Num;
  maxAgentStartingPeriodS: Num;
  instances: ProvisionedInstance[];
  /** Newest first. */
  recentEvents: ProvisionerEvent[];
  /** The provider's last failure, while it persists. */
  lastError: string;
}

export interface GetResourcePoolsResponse {
  resourcePools: ResourcePool[];
}

export interface Workspace {
  id: number;
  name: string;
  archived: boolean;
  immutable: boolean;
  numProjects: number;
  numExperiments: number;
}

export interface Project {
  id: number;
  name: string;
  workspaceId: number;
  workspaceName?: string;
  archived: boolean;
  numExperiments: number;
}

export interface Model {
  id: number;
  name: string;
  description?: string;
  labels?: string[];
  notes?: string;
  metadata?: JsonObject;
  creationTime?: string;
  lastUpdatedTime?: string;
  numVersions: number;
  username: string;
  archived: boolean;
}

export interface ModelVersion {
  id: number;
  version: number;
  name?: string;
  comment?: string;
  labels?: string[];
  creationTime?: string;
  username?: string;
  checkpoint: Checkpoint;
  model: Model;
}

export interface GetModelsResponse {
  models: Model[];
  pagination?: Pagination;
}

export interface GetModelVersionsResponse {
  model: Model;
  modelVersions: ModelVersion[];
  pagination?: Pagination;
}

/**
 * A task that is not a trial, as GetCommands / GetNotebooks / GetShells / GetTensorboards list it
 * (Determined's shapes: the fields the kinds share). `state` is the latest allocation's
 * (STATE_QUEUED, STATE_RUNNING, STATE_TERMINATED, ...).
 */
export interface CommandLike {
  id: string;
  description: string;
  state: string;
  startTime?: string;
  username: string;
  displayName?: string;
  userId?: number;
  resourcePool: string;
  exitStatus?: string;
  serviceAddress?: string;
  experimentIds?: number[];
  trialIds?: number[];
}

export interface TaskAllocation {
  taskId: string;
  allocationId: string;
  state: string;
  isReady?: boolean;
  startTime?: string;
  endTime?: string;
  slots: number;
  exitReason?: string;
}

/** GetTask: a task of any kind with its allocations. */
export interface TaskDetail {
  taskId: string;
  taskType: string;
  allocations?: TaskAllocation[];
  startTime?: string;
  endTime?: string;
}

/** GetTasks: one live allocation of any kind. */
export interface AllocationSummary {
  taskId: string;
  allocationId: string;
  name: string;
  registeredTime?: string;
  resourcePool: string;
  slotsNeeded: number;
  priority?: number;
}

export interface GetTasksResponse {
  allocationIdToSummary?: Record<string, AllocationSummary>;
}

/** The cluster-wide message (master.proto's ClusterMessage). */
export interface ClusterMessage {
  message: string;
  startTime: string;
  endTime?: string | null;
  createdTime?: string | null;
}

/** A single sign-on provider the master offers (Determined's v1SSOProvider). */
export interface SsoProvider {
  name: string;
  /** Where a browser starts a login (the master's /oidc/sso). */
  ssoUrl: string;
  type: string;
  alwaysRedirect?: boolean;
}

/** GetMaster, the fields the WebUI reads. */
export interface MasterInfo {
  version: string;
  clusterName: string;
  featureSwitches?: string[];
  clusterMessage?: ClusterMessage | null;
  ssoProviders?: SsoProvider[];
}

// ---- how teams share the cluster (Cairn's fair share, quotas and pool bindings) ----

/** A workspace's or user's part of a fair-share pool at the scheduler's last pass. */
export interface FairShare {
  /** A workspace: its id; a user: "<workspace id>/<user id>". */
  key: string;
  name: string;
  /** By weight alone, were every group to want the whole pool. */
  nominalSlots: number;
  /** What its share gives it now, given what each group wants. */
  entitledSlots: number;
  heldSlots: number;
  wantedSlots: number;
  /** Held beyond its nominal share. */
  borrowedSlots: number;
  /** Of its nominal share, what it does not want. */
  lentSlots: number;
}

export interface GetResourcePoolSharesResponse {
  fairShare: boolean;
  workspaces: FairShare[];
  users: FairShare[];
  /** Unset before the scheduler's first pass with work. */
  dividedAt?: string;
}

/** A workspace's (userId 0) or one of its users' weight and quota in one fair-share pool. */
export interface PoolShare {
  resourcePool: string;
  userId: number;
  username: string;
  weight: Num;
  guaranteedSlots: number;
  /** 0: no cap. */
  maxSlots: number;
  slotsInUse: number;
  /** Whether the pool divides by weight (fair share); absent: a priority pool, quotas only. */
  fairShare?: boolean;
}

export interface PoolShareSetting {
  userId: number;
  weight: number;
  guaranteedSlots: number;
  maxSlots: number;
}

export interface JobSummary {
  state: string;
  jobsAhead: number;
}

export interface Job {
  summary?: JobSummary;
  type: string;
  submissionTime?: string;
  username: string;
  userId?: number;
  resourcePool: string;
  isPreemptible: boolean;
  priority?: number;
  weight?: Num;
  entityId: string;
  jobId: string;
  requestedSlots: number;
  allocatedSlots: number;
  name: string;
  progress?: number;
  workspaceId: number;
  /** Why it waits; empty while it runs. */
  waitingReason?: string;
  /** The forecast start of a waiting job; absent when none is forecast. */
  predictedStart?: string;
  /** The job it waits for, or why no start is forecast. */
  predictedAfter?: string;
  /** When the forecast behind predictedStart / predictedAfter was made. */
  forecastTime?: string;
}

export interface GetJobsV2Response {
  jobs: { full?: Job }[];
  pagination?: Pagination;
}

export interface UserSummary {
  id: number;
  username: string;
  displayName?: string;
  admin: boolean;
  active: boolean;
}

/** One call of the audit trail (proto/cairn/api/v1/audit.proto); `id` is an int64, as text. */
export interface AuditEvent {
  id: string;
  time?: string;
  userId: number;
  username: string;
  actor: string;
  allocationId: string;
  method: string;
  route: string;
  targets?: Record<string, string>;
  outcome: string;
  error: string;
  address: string;
  transport: string;
  durationMs: Num;
}

export interface GetAuditEventsResponse {
  events?: AuditEvent[];
  nextBeforeId?: string;
}

/** GetTaskSystemMetrics: one series of what a task's containers cost the machine. */
export interface SystemMetricSeries {
  name: string;
  agentId: string;
  gpuUuid?: string;
  unit: string;
  timestamps?: string[];
  values?: number[];
}

export interface GetTaskSystemMetricsResponse {
  series?: SystemMetricSeries[];
  notes?: string[];
  /** The last reading's id in the answer (int64, a string in JSON): the next poll's afterId. */
  lastId?: string;
}
