#!/usr/bin/env bash
# Make sure Debian's chromium is installed for the browser tests (Playwright drives
# /usr/bin/chromium; it never downloads a browser): install it when missing and
# running as root, else say clearly what to do.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "kvlab: /usr/bin/chromium is missing; installing Debian's chromium (for the browser tests)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Fonts so that screenshots show text; none of the desktop recommends (udev, upower...).
  apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
  if [ -x /usr/bin/chromium ]; then
    exit 0
  fi
  echo "kvlab: installed Debian's chromium but /usr/bin/chromium is still missing" >&2
  exit 1
fi
cat >&2 <<'MSG'
kvlab's browser tests (pytest -m browser) need Chromium at /usr/bin/chromium, and it is not installed.
Install it with:   sudo apt-get install chromium
or skip those tests:   .venv/bin/pytest -m "not browser"
MSG
exit 1
