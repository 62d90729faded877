"""The digits MLP of examples/digits trained with torch DistributedDataParallel, one process per
slot, written against Cairn's Core API.

Cairn starts it through its torch launcher (`python3 -m cairn.launch.torch_distributed python3
train.py`): one worker per slot of each container, the containers meeting at the chief's c10d store.
Every worker trains on its shard of each batch (gloo on CPU, NCCL on GPUs), gradients are averaged by
DDP, so a global batch of `batch_size` over N ranks computes what one process would. The chief (rank
0) reports metrics, checkpoints, and restores; every rank reads the checkpoint and stops on
preemption together.

The same script runs under plain torchrun off the cluster (`torchrun --nproc_per_node 2 train.py
[--epochs N] [--hidden-size H]`), which is what bench/ddp_launch.py compares Cairn's launch against.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from typing import Any

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import cairn.core

log = logging.getLogger("digits-ddp")

# report_every: the chief validates and reports every this many epochs (and at the end).
DEFAULT_HPARAMS = {
    "learning_rate": 0.01,
    "hidden_size": 64,
    "dropout": 0.2,
    "batch_size": 32,
    "report_every": 1,
}
CHECKPOINT_EVERY_EPOCHS = 5


def load_data(seed: int = 0) -> tuple[torch.Tensor, ...]:
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)
    return x_train, y_train, x_val, y_val


def build_model(hparams: dict[str, Any]) -> nn.Module:
    hidden = int(hparams["hidden_size"])
    return nn.Sequential(
        nn.Linear(64, hidden),
        nn.ReLU(),
        nn.Dropout(float(hparams["dropout"])),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Dropout(float(hparams["dropout"])),
        nn.Linear(hidden, 10),
    )


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y).item()
        accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    model.train()
    return {"validation_loss": loss, "validation_accuracy": accuracy, "validation_error": 1.0 - accuracy}


def device_for(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        # The agent shows each container only its slots' GPUs; one worker per GPU.
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def main(core: cairn.core.Context, device: torch.device) -> None:
    distributed = core.distributed
    info = core.info
    hparams = {**DEFAULT_HPARAMS, **info.trial.hparams}
    seed = info.trial.trial_seed if info.trial and info.on_cluster else 0
    torch.manual_seed(seed)  # the same initial weights on every rank
    x_train, y_train, x_val, y_val = (t.to(device) for t in load_data())
    model = build_model(hparams).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(hparams["learning_rate"]))
    ddp = DistributedDataParallel(model) if distributed.size > 1 else model
    batch_size = int(hparams["batch_size"])
    if batch_size % distributed.size:
        raise ValueError(f"batch_size {batch_size} must be a multiple of the {distributed.size} ranks")
    per_rank = batch_size // distributed.size

    epoch, batches = 0, 0
    if info.latest_checkpoint:
        with core.checkpoint.restore_path(info.latest_checkpoint) as path:
            state = torch.load(path / "state.pt", weights_only=True, map_location=device)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            progress = json.loads((path / "progress.json").read_text())
            epoch, batches = int(progress["epoch"]), int(progress["batches"])
        log.info("resumed from checkpoint %s at epoch %d", info.latest_checkpoint, epoch)

    def checkpoint() -> None:
        if not distributed.is_chief:
            return
        with core.checkpoint.store_path({"steps_completed": batches, "epoch": epoch}) as (path, _):
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path / "state.pt")
            (path / "progress.json").write_text(json.dumps({"epoch": epoch, "batches": batches}))

    generator = torch.Generator().manual_seed(seed)  # the same batch order on every rank
    timed_steps, timed_seconds, first_step_logged = 0, 0.0, False
    validation: dict[str, float] = {}
    for op in core.searcher.operations():
        while epoch < op.length:
            order = torch.randperm(len(x_train), generator=generator).to(device)
            total_loss, steps = 0.0, 0
            started = time.perf_counter()
            for start in range(0, len(order) - batch_size + 1, batch_size):
                # This rank's share of the global batch.
                index = order[start + distributed.rank * per_rank : start + (distributed.rank + 1) * per_rank]
                loss = nn.functional.cross_entropy(ddp(x_train[index]), y_train[index])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total_loss += loss.item()
                steps += 1
                if not first_step_logged and distributed.is_chief:
                    print(f"TIMING first_step_at={time.time():.3f}", flush=True)
                    first_step_logged = True
            timed_steps += steps
            timed_seconds += time.perf_counter() - started
            epoch += 1
            batches += steps
            report_now = epoch % int(hparams["report_every"]) == 0 or epoch >= op.length
            if distributed.is_chief and report_now:
                validation = evaluate(model, x_val, y_val)
                core.train.report_training_metrics(
                    steps_completed=batches, metrics={"loss": total_loss / steps, "epochs": epoch}
                )
                core.train.report_validation_metrics(
                    steps_completed=batches, metrics={**validation, "epochs": epoch}
                )
                op.report_progress(epoch)
            if epoch % CHECKPOINT_EVERY_EPOCHS == 0:
                checkpoint()
            if core.preempt.should_preempt():
                log.info("preempted at epoch %d: checkpointing and exiting", epoch)
                checkpoint()
                return
        if distributed.is_chief:
            op.report_completed(validation["validation_accuracy"])
        if epoch % CHECKPOINT_EVERY_EPOCHS != 0:
            checkpoint()
    if distributed.is_chief and timed_seconds > 0:
        rate = timed_steps / timed_seconds
        print(f"TIMING steps={timed_steps} seconds={timed_seconds:.4f} steps_per_s={rate:.2f}")
        print(f"FINAL validation_accuracy={validation.get('validation_accuracy', 0.0):.4f}", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    # Off the cluster only; on it the experiment config says.
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--hidden-size", type=int, default=DEFAULT_HPARAMS["hidden_size"])
    parser.add_argument("--report-every", type=int, default=DEFAULT_HPARAMS["report_every"])
    args = parser.parse_args()
    local_hparams = {**DEFAULT_HPARAMS, "hidden_size": args.hidden_size, "report_every": args.report_every}
    launched = "WORLD_SIZE" in os.environ  # by torchrun or Cairn's launcher
    device = device_for(int(os.environ.get("LOCAL_RANK", "0")))
    if launched:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    distributed = cairn.core.DistributedContext.from_torch_distributed() if launched else None
    try:
        with cairn.core.init(
            distributed=distributed,
            searcher_length=args.epochs,
            hparams=local_hparams,
        ) as core_context:
            main(core_context, device)
    finally:
        if launched:
            dist.destroy_process_group()
