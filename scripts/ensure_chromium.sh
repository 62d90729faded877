#!/usr/bin/env bash
# Make Debian's Chromium (and ChromeDriver) available to the WebUI's browser tests, which drive
# /usr/bin/chromium with Playwright. Playwright's own browser downloads are never used.
#
# - /usr/bin/chromium present: nothing to do.
# - Otherwise, as root with apt-get: install Debian's packages chromium and chromium-driver.
# - Otherwise: fail, saying how to install it (the WebUI tests skip, loudly, without it).
# - CAIRN_TEST_BROWSER=skip: do nothing (the browser tests are then skipped, loudly).
set -euo pipefail

if [ "${CAIRN_TEST_BROWSER:-}" = "skip" ]; then
  echo "ensure_chromium: CAIRN_TEST_BROWSER=skip — WebUI browser tests will be skipped" >&2
  exit 0
fi
if [ -x /usr/bin/chromium ]; then
  exit 0
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure_chromium: installing Chromium from Debian's packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine has no package lists yet; an install from stale ones can 404.
  if ! apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q chromium chromium-driver >/dev/null
  fi
else
  echo "ensure_chromium: Chromium is not installed at /usr/bin/chromium." >&2
  echo "  Install it (Debian: apt-get install chromium chromium-driver), or set CAIRN_TEST_BROWSER=skip." >&2
  exit 1
fi

if [ ! -x /usr/bin/chromium ]; then
  echo "ensure_chromium: apt-get finished but /usr/bin/chromium is still missing." >&2
  exit 1
fi
echo "ensure_chromium: $(/usr/bin/chromium --version 2>/dev/null | head -n 1)" >&2
