"""A one-GPU trial that checks what the agent gave it: exactly its slot's GPU, by index and uuid,
CUDA working, and a one-rank NCCL all-reduce; it reports what it saw as metrics."""

import json
import math
import os
import subprocess

import torch
import torch.distributed as dist

import cairn.core

visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
uuids = os.environ.get("CAIRN_GPU_UUIDS", "")
facts = {
    "CUDA_VISIBLE_DEVICES": visible,
    "CAIRN_GPU_UUIDS": uuids,
    "CAIRN_SLOT_IDS": os.environ.get("CAIRN_SLOT_IDS", ""),
    "device_count": torch.cuda.device_count(),
    "name": torch.cuda.get_device_name(0),
}
smi = subprocess.run(
    ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
    capture_output=True,
    text=True,
    check=True,
)
facts["nvidia_smi"] = smi.stdout.strip()
print("PROBE", json.dumps(facts), flush=True)
assert torch.cuda.device_count() == 1, facts
assert uuids and uuids.split(",")[0] in smi.stdout, facts
a = torch.randn(4096, 4096, device="cuda")
product = (a @ a).sum().item()
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29517")
dist.init_process_group("nccl", rank=0, world_size=1)
t = torch.ones(8, device="cuda") * 3
dist.all_reduce(t)
dist.destroy_process_group()
print("PROBE nccl all_reduce", t.tolist(), "nccl", torch.cuda.nccl.version(), flush=True)
with cairn.core.init() as core:
    core.train.report_training_metrics(
        1, {"nccl_sum": float(t.sum().item()), "matmul_finite": float(math.isfinite(product))}
    )
    core.train.report_validation_metrics(1, {"gpus_seen": float(torch.cuda.device_count())})
