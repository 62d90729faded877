"""Generate Python stubs, type stubs and a descriptor set from proto/ into the client package.

Run by `make proto`. The output is never edited by hand and is not committed: every checkout
generates it (the README's setup runs this), so the stubs can never drift from the contracts.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "clients" / "python"
GENERATED_PACKAGES = ("api", "agent", "scheduler", "searcher", "checkpoint", "gateway")
DESCRIPTOR_SET = OUT_DIR / "cairn" / "gen" / "descriptor_set.binpb"


def _include_dirs() -> list[Path]:
    import google.api  # googleapis-common-protos ships google/api/*.proto
    import grpc_tools

    google_api_root = Path(google.api.__path__[0]).parent.parent
    return [PROTO_DIR, Path(grpc_tools.__file__).parent / "_proto", google_api_root]


def main() -> int:
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))
    for pkg in GENERATED_PACKAGES:  # stale outputs of deleted protos must not survive
        shutil.rmtree(OUT_DIR / "cairn" / pkg, ignore_errors=True)
    DESCRIPTOR_SET.parent.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        *(f"-I{d}" for d in _include_dirs()),
        f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
        f"--python_out={OUT_DIR}",
        f"--grpc_python_out={OUT_DIR}",
        f"--mypy_out=quiet:{OUT_DIR}",
        f"--mypy_grpc_out=quiet:{OUT_DIR}",
        f"--descriptor_set_out={DESCRIPTOR_SET}",
        "--include_imports",
        "--include_source_info",
        *protos,
    ]
    result = subprocess.run(cmd, cwd=PROTO_DIR, check=False)
    if result.returncode != 0:
        return result.returncode
    for pkg in GENERATED_PACKAGES:
        for directory in [OUT_DIR / "cairn" / pkg, *(OUT_DIR / "cairn" / pkg).rglob("*")]:
            if directory.is_dir():
                (directory / "__init__.py").touch()
    print(f"generated stubs for {len(protos)} proto files into {OUT_DIR / 'cairn'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
