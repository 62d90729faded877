#!/usr/bin/env bash
# The GPU check, run on a machine with an NVIDIA GPU, PyTorch and Python 3.12 (README.md beside):
# NVML slot discovery (with each GPU's NUMA node and NVLink domain), the GPU health watcher on the
# real driver, a local cluster whose agent offers the GPU as a slot, a one-GPU trial that
# must see exactly its slot's GPU (index and uuid) and run a one-rank NCCL all-reduce, and the DDP
# example (examples/digits-distributed) on one GPU slot with NCCL, both to COMPLETED, and that
# trial's GPU utilisation above zero in the system metrics the agent sampled.
set -x
cd "$(dirname "$0")/../.."
exec > >(tee "${OUT:-/tmp}/check.log") 2>&1
nvidia-smi -L
command -v docker || echo "no docker here: the Docker runtime's GPU devices are not checked"
BASEPY=$(command -v python3); $BASEPY -V
# A venv whose packages are, in order: the wheels carried here, the base's (PyTorch), Cairn's source.
T=/tmp/cairn-gpu-env
$BASEPY -m venv --without-pip $T || exit 1
SP=$($T/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
BASESP=$($BASEPY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
$BASEPY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/cairn-gpu-site .whl/*.whl || exit 1
echo /tmp/cairn-gpu-site > "$SP/00-site.pth"; echo "$BASESP" > "$SP/01-base.pth"
printf '%s\n%s\n' "$PWD/clients/python" "$PWD" > "$SP/02-cairn.pth"
PY=$T/bin/python3
$PY -c "import grpc, google.protobuf, torch, sklearn, cairn, services.master.app; print('imports ok', torch.__version__)" || exit 1
$PY -c "from services.agent.slots import discover_slots, SlotType; [print('SLOT', s) for s in discover_slots('probe', SlotType.GPU, None)]" || exit 1
# GPU health on a real driver: the watcher opens NVML, registers for critical Xid and double-bit
# ECC events, reads the ECC baseline and waits once (no fault can be caused on purpose).
$PY -c "from services.agent.slots import discover_slots, SlotType; from services.agent.gpu_health import GpuHealth; h = GpuHealth(discover_slots('probe', SlotType.GPU, None), on_fault=print); print('HEALTH open', h.open(), repr(h.skipped)); h.poll_once(); print('HEALTH faults', h.faults()); h.stop()"
# The agent samples its containers every 2 s: the DDP trial's GPU series (system_metrics.py).
export CAIRN_STATE_DIR=/tmp/cairn-gpu-state CAIRN_MASTER=127.0.0.1:8090 CAIRN_AGENT_SYSTEM_METRICS_INTERVAL=2
C="$PY -m cairn.cli.main"
timeout 180 $C cluster up --task-env $T --task-user '' --timeout 150 || { tail -50 $CAIRN_STATE_DIR/logs/*; exit 1; }
printf '\n' | $C user login determined --password-stdin
$C agent list; $C slot list
sed 's/slots_per_trial: 2/slots_per_trial: 1/; s/^name: digits-ddp$/name: digits-ddp-1gpu/' \
  examples/digits-distributed/distributed.yaml > /tmp/ddp-1gpu.yaml
timeout 200 $C experiment create scripts/gpu_check/probe/probe.yaml scripts/gpu_check/probe --follow | tail -5
timeout 300 $C experiment create /tmp/ddp-1gpu.yaml examples/digits-distributed --follow | tail -5
$C experiment list
$C trial logs 1 | grep PROBE
$C trial logs 2 | grep -E "torch_distributed|rank=0"
$PY scripts/gpu_check/system_metrics.py http://127.0.0.1:8080 2
$C cluster down
cp -r $CAIRN_STATE_DIR/logs "${OUT:-/tmp}/" 2>/dev/null
