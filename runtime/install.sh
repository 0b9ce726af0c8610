#!/usr/bin/env bash
# Builds the TFX runtime (TFX 1.21, TensorFlow 2.21, Python 3.13) from the lock files. The one
# recipe for every kind of runtime, so they cannot drift:
#   - the image (Dockerfile: `system`, then `deps` and `project` into /opt/venv);
#   - the Debian 13 root on hosts whose glibc is older than 2.39 (make venv: runtime/root.sh
#     builds the root with `system`'s packages, then runs `venv` inside it);
#   - a plain venv on hosts with glibc 2.39+ and Python 3.13 (make venv: `venv`).
#
#   runtime/install.sh system [PKG ...]       Debian's packages (runtime/packages.txt, and PKGs), as root
#   runtime/install.sh deps VENV [LOCK]       the venv and the pinned packages (default lock:
#                                             requirements/tfx.lock; GPU: requirements/tfx-gpu.lock)
#   runtime/install.sh project VENV           this project (editable), its SBOM, bytecode
#   runtime/install.sh venv VENV [LOCK]       deps, then project
#
# Environment: UV (a uv binary to use; else uv $UV_VERSION is installed beside the runtime),
# PYTHON (the interpreter for the venv; default python3.13).
set -euo pipefail
UV_VERSION=0.13.9
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
cd "$REPO"

say() { echo "runtime: $*" >&2; }

system_packages() {  # [EXTRA ...]: the list's packages and any named
  local pkgs; pkgs="$(grep -v '^#' "$HERE/packages.txt" | xargs) $*"
  # shellcheck disable=SC2086
  if dpkg -s $pkgs >/dev/null 2>&1; then return 0; fi
  say "installing Debian packages: $pkgs"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
  rm -rf /var/lib/apt/lists/*
}

uv_bin() {
  if [ -n "${UV:-}" ]; then echo "$UV"; return; fi
  local home=/usr/local/lib/retrain-uv
  if ! "$home/bin/uv" --version 2>/dev/null | grep -q " $UV_VERSION"; then
    "${PYTHON:-python3.13}" -m venv "$home" >&2
    "$home/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION" >&2
  fi
  echo "$home/bin/uv"
}

deps() {
  local venv="$1" lock="${2:-}" uv; uv="$(uv_bin)"
  local python="${PYTHON:-python3.13}"; lock="${lock:-requirements/tfx.lock}"
  "$python" -c 'import sys; assert sys.version_info[:2] == (3, 13), sys.version' 2>/dev/null || {
    echo "error: $python is not Python 3.13 (the TFX runtime's; requirements/tfx.lock is resolved for it)" >&2; exit 1; }
  python="$(command -v "$python")"
  # A venv made from another interpreter (an older runtime's Python 3.10, another host's
  # Python) is made again: uv would refuse to sync it, or sync it for the wrong Python.
  if [ -e "$venv/pyvenv.cfg" ]; then
    local home; home="$(sed -n 's/^home = //p' "$venv/pyvenv.cfg")"
    if [ "$(sed -n 's/^version_info = //p' "$venv/pyvenv.cfg" | cut -d. -f1,2)" != 3.13 ] \
       || [ "$(realpath -m "$home")" != "$(dirname "$(realpath "$python")")" ]; then
      say "$venv was made from $home (Python $(sed -n 's/^version_info = //p' "$venv/pyvenv.cfg")): making it again from $python"
      rm -rf "$venv"
    fi
  fi
  [ -e "$venv/pyvenv.cfg" ] || "$uv" venv --quiet --python "$python" "$venv"
  VIRTUAL_ENV="$venv" "$uv" pip sync --quiet "$lock"
  VIRTUAL_ENV="$venv" "$uv" pip install --quiet --no-deps -r requirements/tfx-nodeps.txt
}

project() {
  local venv="$1" uv; uv="$(uv_bin)"
  VIRTUAL_ENV="$venv" "$uv" pip install --quiet --no-deps -e .
  # Bytecode for every installed module: uv leaves it to the first import, which cannot cache
  # it where PYTHONDONTWRITEBYTECODE is set or site-packages is read-only (the image's uid
  # 1000), so every process compiled TensorFlow's, TFX's and Beam's sources again (~10 s).
  # The SBOM (core/sbom.py) is written meanwhile: it reads package metadata on one core.
  local py="$venv/bin/python"
  "$venv/bin/cyclonedx-py" environment --output-reproducible --of JSON \
    -o "$venv/retrain-runtime.cdx.json" "$py" & local sbom=$!
  "$py" -W ignore::SyntaxWarning -m compileall -q -j 0 "$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null
  wait "$sbom"
  # The interpreter, glibc and the OS are no Python distributions: added so the SBOM names them.
  "$py" -m core.sbom add-platform "$venv/retrain-runtime.cdx.json" >/dev/null
}

case "${1:-}" in
  system) shift; system_packages "$@" ;;
  deps) deps "${2:?VENV}" "${3:-}" ;;
  project) project "${2:?VENV}" ;;
  venv) deps "${2:?VENV}" "${3:-}"; project "$2" ;;
  *) sed -n '2,17p' "$0" >&2; exit 2 ;;
esac
