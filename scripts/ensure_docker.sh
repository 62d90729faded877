#!/usr/bin/env bash
# Make Docker available to the Docker runtime's tests and the task image's build: Debian's docker.io
# and debootstrap, and a running dockerd.
#
# - CAIRN_TEST_DOCKER=skip: do nothing (the Docker tests are then skipped, loudly).
# - As root with apt-get: install docker.io and debootstrap where missing.
# - `docker info` answers: nothing more to do.
# - Otherwise, as root: start dockerd with the flags that work on these machines (no iptables, no
#   bridge: containers use host networking), logging to $CAIRN_DOCKERD_LOG, and wait for it (60 s).
# - Where dockerd cannot start: say why, also in test-artifacts/docker-unavailable.txt (the Docker
#   tests' skips quote it), and exit 0, so the rest of the suite still runs.
set -euo pipefail
cd "$(dirname "$0")/.."

reason_file=test-artifacts/docker-unavailable.txt
log="${CAIRN_DOCKERD_LOG:-/var/log/cairn-dockerd.log}"

if [ "${CAIRN_TEST_DOCKER:-}" = "skip" ]; then
  echo "ensure_docker: CAIRN_TEST_DOCKER=skip — Docker tests will be skipped" >&2
  exit 0
fi

unavailable() {
  mkdir -p "$(dirname "$reason_file")"
  printf '%s\n' "$1" >"$reason_file"
  echo "ensure_docker: $1" >&2
  echo "ensure_docker: the Docker tests will be skipped" >&2
  exit 0
}

is_root() { [ "$(id -u)" = "0" ]; }
answers() { timeout 20 docker info >/dev/null 2>&1; }

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ "${#missing[@]}" -gt 0 ]; then
  if is_root && command -v apt-get >/dev/null 2>&1; then
    echo "ensure_docker: installing ${missing[*]} from Debian's packages" >&2
    export DEBIAN_FRONTEND=noninteractive
    # A fresh machine has no package lists yet; an install from stale ones can 404.
    if ! apt-get install -y -q "${missing[@]}" >/dev/null 2>&1; then
      apt-get update -q >/dev/null
      apt-get install -y -q "${missing[@]}" >/dev/null || unavailable "apt-get install ${missing[*]} failed"
    fi
  elif ! command -v docker >/dev/null 2>&1; then
    unavailable "Docker is not installed and this is not root (Debian: apt-get install docker.io debootstrap)"
  fi
fi

if answers; then
  rm -f "$reason_file"
  exit 0
fi

if ! is_root; then
  unavailable "dockerd is not running and only root can start it here"
fi
if ! command -v dockerd >/dev/null 2>&1; then
  unavailable "dockerd is not installed (Debian: apt-get install docker.io)"
fi
if ! pgrep -x dockerd >/dev/null 2>&1; then
  echo "ensure_docker: starting dockerd (log: $log)" >&2
  # Its own session, so it outlives this make; no iptables or bridge, which these machines lack.
  setsid dockerd --iptables=false --ip6tables=false --bridge=none </dev/null >>"$log" 2>&1 &
fi
for _ in $(seq 1 60); do
  if answers; then
    rm -f "$reason_file"
    echo "ensure_docker: dockerd $(docker version --format '{{.Server.Version}}') is up" >&2
    exit 0
  fi
  sleep 1
done
error="$(timeout 20 docker info 2>&1 >/dev/null | tail -n 2 | tr '\n' ' ')"
unavailable "dockerd did not answer within 60 s (docker info: ${error:-timed out}); the end of $log: $(tail -n 5 "$log" 2>/dev/null | tr '\n' ' ')"
