"""The task image's tags (cairn.task_image): a layer's tag changes exactly when what it is built from
changes, so `make task-image` rebuilds what changed and reuses the rest."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cairn import task_image

REQUIREMENTS = """# what trials run with
-e clients/python
determined==0.38.1
torch==2.13.0  # CPU
scikit-learn
"""
CLIENT_PYPROJECT = """[project]
name = "cairn"
version = "0.1.0"
dependencies = ["grpcio>=1.85.1", "PyYAML>=6"]
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "requirements-task.txt").write_text(REQUIREMENTS)
    client = tmp_path / "clients" / "python"
    (client / "cairn").mkdir(parents=True)
    (client / "pyproject.toml").write_text(CLIENT_PYPROJECT)
    (client / "cairn" / "__init__.py").write_text("")
    (client / "cairn" / "core.py").write_text("def init(): ...\n")
    return tmp_path


def test_tags_are_stable_for_the_same_inputs(repo: Path) -> None:
    first = task_image.image_tags(repo)
    assert task_image.image_tags(repo) == first
    assert re.fullmatch(r"cairn-task:[0-9a-f]{16}", first.image)
    assert re.fullmatch(r"cairn-task-deps:[0-9a-f]{16}", first.deps)
    assert first.base.startswith("cairn-task-base:bookworm-")


def test_editing_the_client_changes_only_the_image_tag(repo: Path) -> None:
    before = task_image.image_tags(repo)
    (repo / "clients/python/cairn/core.py").write_text("def init(): return 1\n")
    after = task_image.image_tags(repo)
    assert after.image != before.image
    assert (after.deps, after.base) == (before.deps, before.base)


def test_a_new_client_file_changes_the_image_tag(repo: Path) -> None:
    before = task_image.image_tag(repo)
    (repo / "clients/python/cairn/gen.py").write_text("")
    assert task_image.image_tag(repo) != before


def test_caches_and_build_outputs_do_not_count(repo: Path) -> None:
    before = task_image.image_tag(repo)
    client = repo / "clients/python"
    (client / "cairn/__pycache__").mkdir()
    (client / "cairn/__pycache__/core.cpython-311.pyc").write_bytes(b"\0")
    (client / "cairn.egg-info").mkdir()
    (client / "cairn.egg-info/PKG-INFO").write_text("x")
    (client / "build/lib").mkdir(parents=True)
    (client / ".mypy_cache").mkdir()
    (client / ".mypy_cache/x.json").write_text("{}")
    assert task_image.image_tag(repo) == before


def test_changing_the_requirements_changes_deps_and_image_tags(repo: Path) -> None:
    before = task_image.image_tags(repo)
    (repo / "requirements-task.txt").write_text(REQUIREMENTS.replace("torch==2.13.0", "torch==2.14.0"))
    after = task_image.image_tags(repo)
    assert after.deps != before.deps
    assert after.image != before.image
    assert after.base == before.base


def test_comments_and_blank_lines_do_not_count(repo: Path) -> None:
    before = task_image.image_tags(repo)
    (repo / "requirements-task.txt").write_text("\n# more words\n" + REQUIREMENTS + "\n")
    assert task_image.image_tags(repo) == before


def test_the_clients_dependencies_are_part_of_the_deps_layer(repo: Path) -> None:
    before = task_image.image_tags(repo)
    pyproject = repo / "clients/python/pyproject.toml"
    pyproject.write_text(CLIENT_PYPROJECT.replace('"PyYAML>=6"', '"PyYAML>=6", "rich>=13"'))
    assert task_image.image_tags(repo).deps != before.deps
    reqs = task_image.read_requirements(repo)
    assert reqs.packages == ("determined==0.38.1", "torch==2.13.0", "scikit-learn")
    assert reqs.client_dependencies == ("grpcio>=1.85.1", "PyYAML>=6", "rich>=13")


def test_a_pip_option_in_the_requirements_is_refused_naming_the_line(repo: Path) -> None:
    (repo / "requirements-task.txt").write_text(REQUIREMENTS + "--extra-index-url http://x\n")
    with pytest.raises(task_image.TaskImageError, match=r"requirements-task.txt:6: '--extra-index-url"):
        task_image.image_tag(repo)


def test_requirements_without_the_client_are_refused(repo: Path) -> None:
    (repo / "requirements-task.txt").write_text("determined==0.38.1\n")
    with pytest.raises(task_image.TaskImageError, match="Cairn client"):
        task_image.image_tag(repo)


def test_this_checkouts_tag_is_computed_from_its_own_files() -> None:
    root = task_image.default_repo_root()
    assert (root / "requirements-task.txt").is_file()
    assert task_image.image_tag() == task_image.image_tag(root)
