#!/usr/bin/env bash
# Makes VENV a virtual environment on PYTHON (scripts/task_python.sh picks it): creates it, or, when
# it exists on another base interpreter, moves it onto PYTHON. Same minor version: only its links
# and pyvenv.cfg change (what `venv --upgrade` rewrites), its packages stay; another minor version:
# built afresh, since compiled packages are built for one.
set -euo pipefail

venv="${1:?usage: task_venv.sh VENV PYTHON}"
python="${2:?usage: task_venv.sh VENV PYTHON}"
base="$(readlink -f "$(command -v "$python")")"

if [[ ! -f "$venv/pyvenv.cfg" ]]; then
    "$python" -m venv "$venv"
    exit 0
fi
current="$(sed -n 's/^executable = //p' "$venv/pyvenv.cfg")"
[[ "$current" == "$base" ]] && exit 0

minor() { "$1" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")'; }
if [[ -x "$current" && "$(minor "$current")" == "$(minor "$base")" ]]; then
    echo "task_venv.sh: moving $venv from $current onto $base (other users can run it)"
    # venv --upgrade keeps existing links: remove them so that it makes them anew.
    rm -f "$venv"/bin/python "$venv"/bin/python3 "$venv"/bin/python3.*[0-9]
    "$python" -m venv --upgrade --without-pip "$venv"
else
    echo "task_venv.sh: rebuilding $venv on $base"
    "$python" -m venv --clear "$venv"
fi
