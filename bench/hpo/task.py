"""The one training task every system in the search-quality benchmark trains.

A multi-layer perceptron on a hard synthetic classification problem (scikit-learn's
make_classification with a fixed data seed: few informative features among many, clusters that
overlap, label noise), trained with AdamW one epoch at a time on one CPU thread. Each system's
trial code calls `train_epoch` and `validation_error` from here, so every system trains the same
model on the same data and measures the same per-epoch validation error.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import random
import tempfile
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
from torch import nn

DATA_SEED = 20261122
SAMPLES = 12_000
VALIDATION_SAMPLES = 4_000
FEATURES = 60
CLASSES = 4


@dataclass(frozen=True)
class Dataset:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor


# Few informative features among many, three overlapping clusters per class, 5% of labels flipped.
DATA_RECIPE: dict[str, Any] = {
    "n_samples": SAMPLES,
    "n_features": FEATURES,
    "n_informative": 12,
    "n_redundant": 8,
    "n_classes": CLASSES,
    "n_clusters_per_class": 3,
    "class_sep": 0.7,
    "flip_y": 0.05,
    "random_state": DATA_SEED,
}
# Where the generated data is kept: trials that start as fresh processes (Cairn's, one per trial and
# per promotion) load it instead of importing scikit-learn and generating it again (~1 s each).
CACHE_DIR_ENV = "BENCH_HPO_CACHE"


def generate_data() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import make_classification  # type: ignore[import-untyped]

    x, y = make_classification(**DATA_RECIPE)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long)


def _cache_file() -> Path:
    # Keyed by everything that shapes the data, so a changed recipe never reads a stale file.
    recipe = json.dumps({**DATA_RECIPE, "scikit-learn": version("scikit-learn")}, sort_keys=True)
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    base = Path(os.environ.get(CACHE_DIR_ENV) or Path(tempfile.gettempdir()) / "cairn-bench-hpo")
    return base / f"data-{key}.pt"


def cached_data() -> tuple[torch.Tensor, torch.Tensor]:
    path = _cache_file()
    if path.exists():
        stored = torch.load(path, weights_only=True)
        return stored["x"], stored["y"]
    x, y = generate_data()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written aside and renamed: two trials starting at once never read a half-written file.
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    torch.save({"x": x, "y": y}, partial)
    partial.replace(path)
    return x, y


@cache
def load_data() -> Dataset:
    features, labels = cached_data()
    train = SAMPLES - VALIDATION_SAMPLES
    # Standardised on the training part only, as a careful practitioner would.
    mean = features[:train].mean(dim=0)
    std = features[:train].std(dim=0)
    features = (features - mean) / std
    return Dataset(features[:train], labels[:train], features[train:], labels[train:])


@dataclass(frozen=True)
class Hyperparameters:
    learning_rate: float
    weight_decay: float
    width: int
    depth: int
    dropout: float
    batch_size: int

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> Hyperparameters:
        return cls(
            learning_rate=float(values["learning_rate"]),
            weight_decay=float(values["weight_decay"]),
            width=int(values["width"]),
            depth=int(values["depth"]),
            dropout=float(values["dropout"]),
            batch_size=int(values["batch_size"]),
        )


# The search space, written once here and translated into each system's own syntax by its runner.
LEARNING_RATE = (1e-4, 1e-1)  # log-uniform
WEIGHT_DECAY = (1e-6, 1e-1)  # log-uniform
WIDTH = (16, 256)  # uniform integer
DEPTH = (1, 4)  # uniform integer
DROPOUT = (0.0, 0.5)  # uniform
BATCH_SIZES = (32, 64, 128, 256)  # categorical


def sample_hyperparameters(rng: random.Random) -> Hyperparameters:
    """A random draw from the space (used for the reference trainings only)."""

    def log_uniform(low: float, high: float) -> float:
        return math.exp(rng.uniform(math.log(low), math.log(high)))

    return Hyperparameters(
        learning_rate=log_uniform(*LEARNING_RATE),
        weight_decay=log_uniform(*WEIGHT_DECAY),
        width=rng.randint(*WIDTH),
        depth=rng.randint(*DEPTH),
        dropout=rng.uniform(*DROPOUT),
        batch_size=rng.choice(BATCH_SIZES),
    )


class Training:
    """One trial's model, optimizer and data order, advanced an epoch at a time; it can be saved
    and restored so a promoted trial resumes where it stopped."""

    def __init__(self, hparams: Hyperparameters, seed: int) -> None:
        # One core per trial: two trials share this machine's two cores.
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        self.hparams = hparams
        self.data = load_data()
        layers: list[nn.Module] = []
        inputs = FEATURES
        for _ in range(hparams.depth):
            layers += [nn.Linear(inputs, hparams.width), nn.ReLU(), nn.Dropout(hparams.dropout)]
            inputs = hparams.width
        layers.append(nn.Linear(inputs, CLASSES))
        self.model = nn.Sequential(*layers)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=hparams.learning_rate, weight_decay=hparams.weight_decay
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.epochs = 0

    def train_epoch(self) -> float:
        """One pass over the training data; returns the mean training loss."""
        self.model.train()
        x, y = self.data.x_train, self.data.y_train
        order = torch.randperm(len(x), generator=self.generator)
        total, steps = 0.0, 0
        for start in range(0, len(order), self.hparams.batch_size):
            index = order[start : start + self.hparams.batch_size]
            loss = nn.functional.cross_entropy(self.model(x[index]), y[index])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            total += loss.item()
            steps += 1
        self.epochs += 1
        return total / steps

    def validation_error(self) -> float:
        """The share of misclassified validation samples; 1.0 for a diverged model."""
        self.model.eval()
        with torch.no_grad():
            logits = self.model(self.data.x_val)
        if not torch.isfinite(logits).all():
            return 1.0
        return float((logits.argmax(dim=1) != self.data.y_val).float().mean().item())

    def state_bytes(self) -> bytes:
        buffer = io.BytesIO()
        torch.save(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state(),
                "epochs": self.epochs,
            },
            buffer,
        )
        return buffer.getvalue()

    def restore(self, blob: bytes) -> None:
        state = torch.load(io.BytesIO(blob), weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.epochs = int(state["epochs"])
