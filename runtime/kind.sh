#!/usr/bin/env bash
# Which kind of TFX runtime this host gets, and why: `native` (a plain venv) where the host's
# glibc is 2.39 or newer and a Python 3.13 runs; `root` (a Debian 13 root, runtime/root.sh)
# otherwise. Prints `native PYTHON` or `root` on stdout and the reason on stderr.
# RETRAIN_RUNTIME=native|root overrides the choice; PYTHON names the interpreter to use.
set -euo pipefail
need=2.39
glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
older() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" != "$2" ]; }  # $1 < $2
is313() { "$1" -c 'import sys; assert sys.version_info[:2] == (3, 13)' >/dev/null 2>&1; }
python=""
for p in "${PYTHON:-}" python3.13 /usr/bin/python3.13 /usr/local/bin/python3.13 "$HOME"/.pyenv/versions/3.13*/bin/python3.13; do
  [ -n "$p" ] || continue
  p="$(command -v "$p" 2>/dev/null || true)"
  if [ -n "$p" ] && is313 "$p"; then python="$p"; break; fi
done
case "${RETRAIN_RUNTIME:-}" in
  "") ;;
  native)
    [ -n "$python" ] || { echo "error: RETRAIN_RUNTIME=native, but no Python 3.13 runs here (set PYTHON)" >&2; exit 2; }
    echo "runtime: native (RETRAIN_RUNTIME says so; host glibc ${glibc:-unknown}, $python)" >&2
    echo "native $python"; exit 0 ;;
  root)
    echo "runtime: root (RETRAIN_RUNTIME says so; host glibc ${glibc:-unknown})" >&2
    echo root; exit 0 ;;
  *) echo "error: RETRAIN_RUNTIME must be native or root, not $RETRAIN_RUNTIME" >&2; exit 2 ;;
esac
if [ -z "$glibc" ] || older "$glibc" "$need"; then
  echo "runtime: root (host glibc ${glibc:-unknown} < $need, which the ml-metadata and TFDV 1.21 wheels need: a Debian 13 root)" >&2
  echo root
elif [ -z "$python" ]; then
  echo "runtime: root (host glibc $glibc is new enough, but no Python 3.13 runs here: a Debian 13 root)" >&2
  echo root
else
  echo "runtime: native (host glibc $glibc >= $need and $python is Python 3.13: a plain venv)" >&2
  echo "native $python"
fi
