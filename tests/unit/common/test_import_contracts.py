"""The house's import contracts (pyproject.toml's import-linter section: the master's floors and the
rooms of its domain, no import circle anywhere in services/, the ground importing no service, the
services never importing one another) hold, so CI fails on an arrow that runs back up, not only
`make lint`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_every_import_contract_is_kept(tmp_path: Path) -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), "--cache-dir", str(tmp_path / "cache")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout
