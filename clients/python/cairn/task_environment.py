"""The task environment's variable names: the contract between the master and agent (which set them
for every task) and the Core API and launchers (which read them), written once here. Determined's
own names (DET_*) are Determined's contract and are set beside these for its harness."""

from __future__ import annotations

# Set by the master (services/master/domain/allocations/task_spec.py).
ALLOCATION_ID = "CAIRN_ALLOCATION_ID"
ALLOCATION_TOKEN = "CAIRN_ALLOCATION_TOKEN"
TASK_ID = "CAIRN_TASK_ID"
TASK_TYPE = "CAIRN_TASK_TYPE"
TRIAL_ID = "CAIRN_TRIAL_ID"
EXPERIMENT_ID = "CAIRN_EXPERIMENT_ID"
TRIAL_RUN_ID = "CAIRN_TRIAL_RUN_ID"
TRIAL_SEED = "CAIRN_TRIAL_SEED"
HPARAMS = "CAIRN_HPARAMS"
EXPERIMENT_CONFIG = "CAIRN_EXPERIMENT_CONFIG"
STEPS_COMPLETED = "CAIRN_STEPS_COMPLETED"
USER = "CAIRN_USER"
SEARCHER_TARGET = "CAIRN_SEARCHER_TARGET"
MASTER_HTTP_PORT = "CAIRN_MASTER_HTTP_PORT"
LATEST_CHECKPOINT = "CAIRN_LATEST_CHECKPOINT"
# Where a task that serves through the master's proxy (a notebook, a TensorBoard, a shell)
# listens (services/master/domain/allocations/task_services.py).
SERVICE_HOST = "CAIRN_SERVICE_HOST"
SERVICE_PORT = "CAIRN_SERVICE_PORT"
# Set for a notebook with an idle_timeout: how its launcher judges it idle (notebook_idle_type).
NOTEBOOK_IDLE_TYPE = "CAIRN_NOTEBOOK_IDLE_TYPE"
# A shell's public key (OpenSSH format): the one key its SSH server lets in (cairn.shell_server).
SHELL_PUBLIC_KEY = "CAIRN_SHELL_PUBLIC_KEY"
# A TensorBoard's trials, each with its experiment's checkpoint storage (JSON; the master's
# task_kinds/tensorboard.py).
TENSORBOARD_SOURCES = "CAIRN_TENSORBOARD_SOURCES"

# Set by the agent (services/agent/containers/task_env.py).
AGENT_ID = "CAIRN_AGENT_ID"
CONTAINER_ID = "CAIRN_CONTAINER_ID"
SLOT_IDS = "CAIRN_SLOT_IDS"
# The cluster's id (Determined's name): TensorBoard files are stored under it (cairn.tensorboard).
CLUSTER_ID = "DET_CLUSTER_ID"
WORKDIR = "CAIRN_WORKDIR"
MASTER_ADDR = "CAIRN_MASTER_ADDR"
GPU_UUIDS = "CAIRN_GPU_UUIDS"
# The allocation's containers (the master's rendezvous info, as the agent received it).
CONTAINER_RANK = "CAIRN_CONTAINER_RANK"
CONTAINER_ADDRS = "CAIRN_CONTAINER_ADDRS"
CONTAINER_SLOT_COUNTS = "CAIRN_CONTAINER_SLOT_COUNTS"
CHIEF_IP = "CAIRN_CHIEF_IP"
C10D_PORT = "CAIRN_C10D_PORT"
COLLECTIVES_PORT = "CAIRN_COLLECTIVES_PORT"

# Read by the Core API only (set by the user off the cluster).
COLLECTIVES_KEY = "CAIRN_COLLECTIVES_KEY"
SEARCHER_LENGTH = "CAIRN_SEARCHER_LENGTH"
LOCAL_CHECKPOINT_DIR = "CAIRN_LOCAL_CHECKPOINT_DIR"
