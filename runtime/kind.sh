#!/usr/bin/env bash
# Which kind of TFX runtime this host gets, and why: `native` (a plain venv) where the host's
# glibc is 2.39 or newer and a Python 3.13 runs; `root` (a Debian 13 root, runtime/root.sh)
# otherwise. Prints the kind on stdout and the reason on stderr. RETRAIN_RUNTIME=native|root
# overrides the choice.
set -euo pipefail
need=2.39
glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
python="${PYTHON:-$(command -v python3.13 || true)}"
older() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" != "$2" ]; }  # $1 < $2
if [ -n "${RETRAIN_RUNTIME:-}" ]; then
  case "$RETRAIN_RUNTIME" in native|root) ;; *) echo "error: RETRAIN_RUNTIME must be native or root, not $RETRAIN_RUNTIME" >&2; exit 2 ;; esac
  echo "runtime: $RETRAIN_RUNTIME (RETRAIN_RUNTIME says so; host glibc ${glibc:-unknown})" >&2
  echo "$RETRAIN_RUNTIME"
elif [ -z "$glibc" ] || older "$glibc" "$need"; then
  echo "runtime: root (host glibc ${glibc:-unknown} < $need, which the ml-metadata and TFDV 1.21 wheels need: a Debian 13 root)" >&2
  echo root
elif [ -z "$python" ] || ! "$python" -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null; then
  echo "runtime: root (host glibc $glibc is new enough, but no Python 3.13 runs here: a Debian 13 root)" >&2
  echo root
else
  echo "runtime: native (host glibc $glibc >= $need and $python is Python 3.13: a plain venv)" >&2
  echo native
fi
