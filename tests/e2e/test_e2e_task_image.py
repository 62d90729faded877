"""The task image (`make task-image`) holds what trials run with, and a Determined Core API script runs
in it unchanged. Containers run with host networking, as the Docker runtime runs them."""

from __future__ import annotations

from collections.abc import Iterator

import docker
import pytest

from cairn import task_image as task_image_tags

# A Determined Core API training script as users write it: off the cluster, core.init() gives
# Determined's local contexts, so it runs to the end without a master.
CORE_API_SCRIPT = """
import determined as det
from determined import core
import torch

print("imported determined", det.__version__, flush=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
with core.init() as context:
    for step in range(1, 4):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        context.train.report_training_metrics(steps_completed=step, metrics={"loss": loss.item()})
print("trained steps", step, flush=True)
"""


@pytest.fixture(scope="module")
def client(task_image: str) -> Iterator[docker.DockerClient]:
    # After task_image, which skips where dockerd does not answer.
    c = docker.from_env(timeout=120)
    yield c
    c.close()


def run(client: docker.DockerClient, image: str, *command: str) -> str:
    out = client.containers.run(
        image, list(command), network_mode="host", remove=True, stdout=True, stderr=True
    )
    return out.decode()


def test_image_holds_determined_torch_sklearn_and_cairn(client: docker.DockerClient, task_image: str) -> None:
    out = run(
        client,
        task_image,
        "python3",
        "-c",
        "import determined, torch, sklearn, tensorboard, cairn.core; print(determined.__version__)",
    )
    assert out.strip().splitlines()[-1] == "0.38.1"


def test_the_venv_python_is_first_on_path(client: docker.DockerClient, task_image: str) -> None:
    out = run(
        client,
        task_image,
        "sh",
        "-c",
        "command -v python3; command -v cairn;"
        " python3 -c 'import os, sys; print(sys.prefix, sys.version_info[:2], os.getcwd())'",
    )
    python3, cairn_cli, facts = out.strip().splitlines()
    assert python3 == f"{task_image_tags.VENV}/bin/python3"
    assert cairn_cli == f"{task_image_tags.VENV}/bin/cairn"
    assert facts == f"{task_image_tags.VENV} (3, 11) {task_image_tags.WORKDIR}"


def test_a_determined_core_api_script_runs(client: docker.DockerClient, task_image: str) -> None:
    out = run(client, task_image, "python3", "-c", CORE_API_SCRIPT)
    assert "imported determined 0.38.1" in out
    assert "trained steps 3" in out


def test_labels_say_what_the_image_holds(client: docker.DockerClient, task_image: str) -> None:
    labels = client.images.get(task_image).labels
    packages = labels[task_image_tags.LABEL_PACKAGES].split()
    assert "determined==0.38.1" in packages
    assert any(p.startswith("torch==2.13.0") for p in packages)
    assert any(p.startswith("scikit-learn==") for p in packages)
    assert any(p.startswith("cairn==") for p in packages)
    assert labels[task_image_tags.LABEL_CLIENT_HASH] == task_image_tags.image_tags().client_hash
