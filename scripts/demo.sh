#!/usr/bin/env bash
# The main job (`make demo`): a local cluster with two agents, a random hyperparameter search on
# scikit-learn's digits with a live view, then the trials and where to look further.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
export CAIRN_STATE_DIR="${CAIRN_STATE_DIR:-$PWD/.cairn/demo}"
export CAIRN_MASTER="${CAIRN_MASTER:-127.0.0.1:8090}"

if $BIN/cairn cluster status --quiet >/dev/null 2>&1; then
  echo "A demo cluster is already running (state in $CAIRN_STATE_DIR); using it."
else
  $BIN/cairn cluster up --agents 2 --slots 1
fi
printf '\n' | $BIN/cairn user login determined --password-stdin >/dev/null

echo
echo "Running examples/digits/random.yaml: 8 trials of a PyTorch MLP, 2 at a time."
set +e
$BIN/cairn experiment create examples/digits/random.yaml examples/digits --follow | tee .cairn/demo-create.log
status=${PIPESTATUS[0]}
set -e
experiment_id=$(grep -oE 'Created experiment [0-9]+' .cairn/demo-create.log | grep -oE '[0-9]+' | head -1)
if [ -n "${experiment_id}" ]; then
  echo
  $BIN/cairn experiment describe "${experiment_id}"
fi
cat <<HINT

Look further:
  WebUI: http://127.0.0.1:8080/  (user determined, empty password): learning curves, trials, logs, the slot map
  source .venv/bin/activate; export CAIRN_MASTER=${CAIRN_MASTER} CAIRN_STATE_DIR=${CAIRN_STATE_DIR}
  cairn experiment list                 # every experiment
  cairn trial logs <trial id>           # a trial's output (-f to follow a running one)
  cairn checkpoint list ${experiment_id:-<experiment id>}          # what the GC policy kept
  cairn agent list; cairn slot list     # the cluster
  cairn cluster down                    # stop everything (the state stays in CAIRN_STATE_DIR)
HINT
exit "${status}"
