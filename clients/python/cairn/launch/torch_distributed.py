"""`python3 -m cairn.launch.torch_distributed [TORCHRUN_OPTIONS... --] SCRIPT...`: run SCRIPT once per
slot of this container under torch's elastic launcher (torchrun), the containers of the trial meeting
at the chief's c10d store.

Each worker gets torchrun's variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE), so `dist.init_process_group()` and Cairn's
`cairn.core.init()` find their place without arguments, and every line it prints is tagged with its
rank (cairn.launch.wrap_rank). torchrun runs with --max_restarts 0: a worker that fails takes the
container's other workers down, and the master then stops the other containers, the whole trial
failing once. The chief's address and the port come from the cluster info (the master gives each
allocation its own port, so trials sharing a machine do not collide). TORCHRUN_OPTIONS override
what is set here. Off a cluster it runs one worker unless told otherwise (--nproc_per_node).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

import cairn.task_environment as tenv
from cairn.core.cluster_info import ClusterInfo, get_cluster_info
from cairn.core.errors import ClusterInfoError

DEFAULT_C10D_PORT = 29400
USAGE = "usage: python3 -m cairn.launch.torch_distributed [TORCHRUN_OPTIONS... --] SCRIPT..."


def split_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(torchrun overrides, the script's command)."""
    args = list(argv)
    if "--" in args:
        split = args.index("--")
        return args[:split], args[split + 1 :]
    return [], args


def c10d_port(env: os._Environ[str] | dict[str, str] = os.environ) -> int:
    raw = env.get(tenv.C10D_PORT) or env.get("C10D_PORT") or str(DEFAULT_C10D_PORT)
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise SystemExit(f"torch_distributed: CAIRN_C10D_PORT: {raw!r} is not a port number")
    return int(raw)


def launch_command(
    info: ClusterInfo | None, overrides: Sequence[str], script: Sequence[str], port: int
) -> list[str]:
    if info is not None:
        nodes = info.num_containers
        per_node = max(1, len(info.slot_ids))
        node_rank = info.container_rank
        master = info.chief_ip if nodes > 1 else "127.0.0.1"
    else:
        nodes, per_node, node_rank, master = 1, 1, 0, "127.0.0.1"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nodes),
        "--nproc_per_node",
        str(per_node),
        "--node_rank",
        str(node_rank),
        "--master_addr",
        master,
        "--master_port",
        str(port),
        "--max_restarts",
        "0",
    ]
    command += list(overrides)
    # Each worker: `python -u -m cairn.launch.wrap_rank RANK -- SCRIPT...` (the RANK torchrun sets).
    command += ["--module", "cairn.launch.wrap_rank", "RANK", "--", *script]
    return command


def main(argv: Sequence[str] | None = None) -> int:
    overrides, script = split_args(sys.argv[1:] if argv is None else argv)
    if not script:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        info = get_cluster_info()
    except ClusterInfoError as exc:
        print(f"torch_distributed: {exc}", file=sys.stderr)
        return 2
    # Only looked up, not imported: importing torch here would cost a second of the trial's start,
    # and torchrun imports it anyway.
    if importlib.util.find_spec("torch") is None:
        print(
            "torch_distributed: PyTorch is not installed in this task environment; choose one that "
            "has it (environment.image) or install torch",
            file=sys.stderr,
        )
        return 2
    command = launch_command(info, overrides, script, c10d_port())
    print(f"torch_distributed: {' '.join(command)}", flush=True)
    child = subprocess.Popen(command)

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
