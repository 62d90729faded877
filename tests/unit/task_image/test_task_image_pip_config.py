"""The task image's build carries this machine's pip configuration into its build container: local
paths are mounted read-only under the build folder and named there in the merged config file."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"


@pytest.fixture
def pip_config(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    from task_image_build import pip_config as module

    return module


def test_local_paths_are_mounted_and_renamed(
    pip_config: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = tmp_path / "wheels"
    index = tmp_path / "mirror" / "simple"
    wheels.mkdir()
    index.mkdir(parents=True)
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"file://{index} https://example.org/simple")
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "77")

    config = pip_config.host_pip_config(sys.executable)

    prefix = pip_config.HOST_PREFIX
    options = config.sections["global"]
    assert options["find-links"] == f"{prefix}{wheels}"
    # An index's pages link to files beside it: its parent folder is mounted.
    assert options["extra-index-url"] == f"file://{prefix}{index} https://example.org/simple"
    assert options["default-timeout"] == "77"
    mounts = dict(config.mounts)
    assert mounts[wheels.resolve()] == f"{prefix}{wheels}"
    assert mounts[index.parent.resolve()] == f"{prefix}{index.parent}"
    args = config.docker_mounts(tmp_path / "pip.conf")
    assert f"{wheels.resolve()}:{prefix}{wheels}:ro" in args
    assert f"{tmp_path / 'pip.conf'}:{pip_config.CONTAINER_CONFIG_FILE}:ro" in args
    assert f"find-links = {prefix}{wheels}" in config.ini_text()


def test_paths_that_do_not_exist_are_kept_as_written(
    pip_config: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("PIP_FIND_LINKS", str(missing))
    config = pip_config.host_pip_config(sys.executable)
    assert config.sections["global"]["find-links"] == str(missing)
    assert missing.resolve() not in dict(config.mounts)


def test_the_config_file_setting_is_not_carried(
    pip_config: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "pip.conf"
    file.write_text("[global]\ntimeout = 5\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(file))
    config = pip_config.host_pip_config(sys.executable)
    assert config.sections["global"]["timeout"] == "5"
    assert all("config-file" not in options for options in config.sections.values())
