#!/usr/bin/env bash
# Installs the Debian packages Muser builds and tests with, when missing.
# Everything it prints goes to stderr, so a caller's stdout stays clean.
# Node.js/npm (for the server's client tests) count as present when the
# commands exist, whatever package provided them.
set -euo pipefail
packages=(build-essential cmake pkg-config libpcre2-dev libcjson-dev libmicrohttpd-dev
          clang libclang-rt-14-dev gnuplot-nox jq)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq >&2 || true
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
