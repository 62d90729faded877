#!/usr/bin/env bash
# Prints the interpreter to build the task environment (.venv-task) on: the first of "$1" (the
# build's Python) and the system's Pythons of the same minor version that every user can run.
#
# Why: a local cluster run as root runs trials as an unprivileged user (cairn-task), and a venv
# runs on its base interpreter and that interpreter's standard library. A Python installed under
# a home folder (pyenv's /root/.pyenv, mode 0700) is out of that user's reach, so trials built on
# it could not start and `cairn cluster up` would fall back to running them unisolated.
# When no candidate is reachable it prints "$1" anyway and says so on stderr (`cluster up` then
# warns that trials are not isolated).
set -euo pipefail

wanted="${1:?usage: task_python.sh PYTHON}"

# Every folder from / down to $1 can be entered by others, and $1 itself has the permission bits
# $2 for them (5: read and run, 4: read).
reachable_by_others() {
    local path="$1" bits="$2" dir
    [[ -e "$path" ]] || return 1
    path="$(readlink -f "$path")"
    [[ $(( 0$(stat -c %a "$path") & bits )) -eq $bits ]] || return 1
    dir="$(dirname "$path")"
    while :; do
        [[ $(( 0$(stat -c %a "$dir") & 01 )) -eq 1 ]] || return 1
        [[ "$dir" == "/" ]] && return 0
        dir="$(dirname "$dir")"
    done
}

# The interpreter itself (as it names itself: a launcher such as pyenv's shim is not it)
# if it and its standard library are both reachable, with venv and ensurepip to build on it.
usable() {
    local python="$1" real stdlib
    [[ -x "$python" ]] || return 1
    real="$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null)" || return 1
    reachable_by_others "$real" 5 || return 1
    stdlib="$("$real" -c 'import ensurepip, sysconfig, venv; print(sysconfig.get_paths()["stdlib"])' 2>/dev/null)" \
        || return 1
    reachable_by_others "$stdlib/os.py" 4 || return 1
    echo "$real"
}

minor="$("$wanted" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
for candidate in "$(command -v "$wanted")" "/usr/bin/python$minor" "/usr/local/bin/python$minor"; do
    if usable "$candidate"; then
        exit 0
    fi
done
echo "task_python.sh: no Python $minor that other users can run; trials of a local cluster run as root will not be isolated" >&2
echo "$wanted"
