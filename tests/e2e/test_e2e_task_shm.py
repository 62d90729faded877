"""`resources.shm_size` on the process runtime, with the stock `det` on a cluster of one agent and
one slot: a command's /dev/shm is a tmpfs of the size asked (Determined's 4 GiB when unset), as
`df -B1 /dev/shm` sees it from inside the command."""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytestmark = [pytest.mark.one_slot, pytest.mark.usefixtures("needs_private_mounts")]


def shm_bytes(output: str) -> int:
    (line,) = [x for x in output.splitlines() if x.startswith("tmpfs") and x.rstrip().endswith("/dev/shm")]
    return int(line.split()[1])


def test_a_commands_dev_shm_has_the_size_its_config_asks(det: Callable[..., str]) -> None:
    asked = det("cmd", "run", "--config", "resources.shm_size=256M", "df -B1 /dev/shm")
    assert shm_bytes(asked) == 256 << 20
    default = det("cmd", "run", "df -B1 /dev/shm")
    assert shm_bytes(default) == 4 << 30
