"""A PyTorch MLP on scikit-learn's bundled digits data, written against Cairn's Core API.

It trains for the length the searcher asks (in epochs), reports training and validation metrics,
checkpoints every few epochs and when preempted, and resumes from the latest checkpoint — so it can
be paused, restarted after a crash, or promoted by the searcher without losing its place. The same
script runs off-cluster: `python train.py` trains with default hyperparameters.
"""

from __future__ import annotations

import json
import logging
import pathlib
from typing import Any

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import cairn.core

log = logging.getLogger("digits")

DEFAULT_HPARAMS = {"learning_rate": 0.01, "hidden_size": 64, "dropout": 0.2, "batch_size": 32}
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


def save(
    path: pathlib.Path, model: nn.Module, optimizer: torch.optim.Optimizer, epoch: int, batches: int
) -> None:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path / "state.pt")
    (path / "progress.json").write_text(json.dumps({"epoch": epoch, "batches": batches}))


def restore(path: pathlib.Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[int, int]:
    state = torch.load(path / "state.pt", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    progress = json.loads((path / "progress.json").read_text())
    return int(progress["epoch"]), int(progress["batches"])


def main(core: cairn.core.Context) -> None:
    info = core.info
    hparams = {**DEFAULT_HPARAMS, **(info.trial.hparams if info.trial else {})}
    seed = info.trial.trial_seed if info.trial else 0
    torch.manual_seed(seed)
    x_train, y_train, x_val, y_val = load_data()
    model = build_model(hparams)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(hparams["learning_rate"]))
    batch_size = int(hparams["batch_size"])

    epoch, batches = 0, 0
    if info.latest_checkpoint:
        with core.checkpoint.restore_path(info.latest_checkpoint) as path:
            epoch, batches = restore(path, model, optimizer)
        log.info("resumed from checkpoint %s at epoch %d", info.latest_checkpoint, epoch)

    def checkpoint() -> None:
        with core.checkpoint.store_path({"steps_completed": batches, "epoch": epoch}) as (path, _uuid):
            save(path, model, optimizer, epoch, batches)

    generator = torch.Generator().manual_seed(seed)
    for op in core.searcher.operations():
        while epoch < op.length:
            order = torch.randperm(len(x_train), generator=generator)
            total_loss = 0.0
            steps = 0
            for start in range(0, len(order), batch_size):
                index = order[start : start + batch_size]
                loss = nn.functional.cross_entropy(model(x_train[index]), y_train[index])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total_loss += loss.item()
                steps += 1
            epoch += 1
            batches += steps
            core.train.report_training_metrics(
                steps_completed=batches, metrics={"loss": total_loss / steps, "epochs": epoch}
            )
            validation = evaluate(model, x_val, y_val)
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
        op.report_completed(validation["validation_accuracy"])
        if epoch % CHECKPOINT_EVERY_EPOCHS != 0:
            checkpoint()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    with cairn.core.init(searcher_length=10, hparams=DEFAULT_HPARAMS) as core_context:
        main(core_context)
