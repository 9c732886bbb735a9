#!/bin/sh
# Install the native provider's system tools (bubblewrap and the document/image/OCR tools it
# runs) on Debian or Ubuntu. Run as root:   sudo sh scripts/install-native.sh
# Elsewhere (not root, or no apt-get) it changes nothing and says what to install by hand.
# Then build the python-data environment and the pinned JavaScript toolchain (Node 24, bun, tsc,
# Biome, uv; what the node, typescript-native and bun profiles run) once:
#   python -m wasm_runner.providers.native prepare      (scripts/install runs `wasm-runner prepare`, which does both)
set -eu

PACKAGES="bubblewrap python3-seccomp util-linux mount pandoc tesseract-ocr tesseract-ocr-eng imagemagick poppler-utils fonts-dejavu-core python3 python3-venv ca-certificates"
# The command-line tools an agent's first scripts reach for (Debian calls fd `fdfind`, httpie `http`).
PACKAGES="$PACKAGES tree jq ripgrep fd-find git curl wget zip unzip sqlite3 file make httpie"
# PDF: the system libraries WeasyPrint (in python-data; pandoc's PDF engine in the sandbox) loads, and
# Ghostscript, which ImageMagick hands the reading of PDF to (the sandbox's ImageMagick policy allows PDF).
PACKAGES="$PACKAGES libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz-subset0 ghostscript"
OPTIONAL="nodejs"
# A root service runs every native sandbox as this unprivileged system user (never as root).
SANDBOX_USER="${WASM_RUNNER_SANDBOX_USER:-wasm-runner-sandbox}"

say() { printf 'install-native: %s\n' "$*" >&2; }

if [ "$(uname -s)" != "Linux" ]; then
  say "the native provider needs Linux (bubblewrap); nothing installed on $(uname -s)"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  say "no apt-get here: install with your package manager: $PACKAGES (optional: $OPTIONAL)"
  exit 0
fi
. /etc/os-release 2>/dev/null || true
case "${ID:-}:${ID_LIKE:-}" in
  debian:*|ubuntu:*|*:*debian*|*:*ubuntu*) ;;
  *) say "not Debian/Ubuntu (${ID:-unknown}): install by hand: $PACKAGES (optional: $OPTIONAL)"; exit 0 ;;
esac
if [ "$(id -u)" != "0" ]; then
  say "not root: run   sudo sh $0   (would install: $PACKAGES; optional: $OPTIONAL)"
  exit 0
fi

if ! id "$SANDBOX_USER" >/dev/null 2>&1; then
  say "creating the unprivileged system user $SANDBOX_USER (native sandboxes run as it)"
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin --user-group "$SANDBOX_USER"
fi

missing=""
for package in $PACKAGES; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing="$missing $package"
done
if [ -z "$missing" ] && command -v node >/dev/null 2>&1; then
  say "all native tools already installed"
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
say "apt-get update"
apt-get update -q
say "installing: $PACKAGES"
# shellcheck disable=SC2086  # word splitting of the package list is intended
apt-get install -y -q --no-install-recommends $PACKAGES
if ! command -v node >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  apt-get install -y -q --no-install-recommends $OPTIONAL || say "nodejs not installed (optional: the node profile stays unavailable)"
fi
say "done; check with:   wasm-runner doctor   (or python -m wasm_runner.providers.native doctor)"
