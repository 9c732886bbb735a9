#!/bin/sh
# Install Debian's chromium for the console's browser tests (Playwright drives it through
# executable_path; Playwright's own browser download is not used). Run as root on Debian/Ubuntu;
# elsewhere it changes nothing and says what to install. Without chromium those tests are skipped.
set -eu

say() { printf 'install-browser: %s\n' "$*" >&2; }

if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != "0" ]; then
  say "chromium is missing: install it (Debian: sudo apt-get install chromium) to run the console's browser tests"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
say "installing chromium"
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core || say "chromium not installed: the browser tests will be skipped"
