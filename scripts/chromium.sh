#!/usr/bin/env bash
# Makes sure a Chromium for the browser tests (browsertest/) is installed:
# it uses $POSTROOM_CHROMIUM or a chromium already on PATH; otherwise it
# installs Debian's chromium package (as root, or with sudo). It says what
# it did; where it cannot act it stops with what to do.
set -euo pipefail

say() { echo "chromium: $*"; }

if [ -n "${POSTROOM_CHROMIUM:-}" ]; then
  if [ -x "$POSTROOM_CHROMIUM" ]; then
    say "using \$POSTROOM_CHROMIUM=$POSTROOM_CHROMIUM ($("$POSTROOM_CHROMIUM" --version 2>/dev/null || echo 'version unknown'))"
    exit 0
  fi
  say "\$POSTROOM_CHROMIUM=$POSTROOM_CHROMIUM is not an executable: fix or unset it"; exit 1
fi
for name in chromium chromium-browser; do
  if command -v "$name" >/dev/null; then
    say "already installed: $(command -v "$name") ($("$name" --version 2>/dev/null || echo 'version unknown'))"
    exit 0
  fi
done

if ! command -v apt-get >/dev/null; then
  say "no chromium on PATH and no apt-get here: install Chromium, or set POSTROOM_CHROMIUM to its path, then run again"; exit 1
fi
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    say "need root to run: $*"; exit 1; fi
}
say "apt-get update"
as_root apt-get update -qq
say "installing Debian's chromium package"
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
say "installed: $(command -v chromium) ($(chromium --version 2>/dev/null || echo 'version unknown'))"
