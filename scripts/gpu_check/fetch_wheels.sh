#!/usr/bin/env bash
# Downloads, into .whl/ (ignored), the wheels the services need that a GPU machine's Python 3.12
# (the lent device's PyTorch image) lacks or has at other versions: the services' pins from here.
# The machine reaches no registry, so they travel with the working tree (scripts/gpu_check/README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
  manylinux2014_x86_64 manylinux1_x86_64 any; do platforms+=(--platform "$p"); done
pin() { .venv/bin/python -c "import importlib.metadata as m; print('$1==' + m.version('$1'))"; }
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d .whl \
  "$(pin grpcio)" "$(pin grpcio-health-checking)" "$(pin grpcio-reflection)" "$(pin protobuf)" \
  "$(pin googleapis-common-protos)" "$(pin SQLAlchemy)" "$(pin greenlet)" "$(pin alembic)" "$(pin Mako)" \
  "$(pin structlog)" "$(pin jsonschema)" "$(pin jsonschema-specifications)" "$(pin referencing)" \
  "$(pin rpds-py)" "$(pin orjson)" "$(pin docker)" "$(pin cryptography)" "$(pin cffi)" "$(pin pycparser)" \
  "$(pin boto3)" "$(pin botocore)" "$(pin s3transfer)" "$(pin jmespath)" "$(pin nvidia-ml-py)" \
  "$(pin typing_extensions)" "$(pin psycopg2-binary)"
du -sh .whl
