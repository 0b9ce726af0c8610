#!/usr/bin/env bash
# Runs one command inside the TFX runtime's Debian 13 root (runtime/root.sh builds it) with the
# host's own folders bind-mounted at the same paths: the repo, workdirs, /tmp, $HOME, /proc,
# /dev... so a path means the same thing on both sides and never needs translating. The mounts
# live in a private mount namespace that ends with the command; the command keeps this
# process's pid (every step execs), so process groups, signals and exit codes are the host's.
#
#   runtime/enter.sh ROOT COMMAND [ARGS...]
#
# Nobody types this: `.venv/bin/python` (runtime/python.sh) calls it on hosts whose glibc is
# too old for the runtime's wheels. Needs root, or unprivileged user namespaces (unshare -r).
set -euo pipefail

if [ "${1:-}" = --in-namespace ]; then
  # Second step, in the new mount namespace: bind the host's non-system folders first
  # (recursively, while the root has no mounts of its own, so nothing is mounted twice), then
  # the kernel's file systems, then the /etc files that describe this host (DNS, hosts, users, the CAs it trusts).
  root="$2"; cwd="$3"; shift 3
  for d in /*; do
    [ -d "$d" ] && [ ! -L "$d" ] || continue
    case "$d" in
      /bin|/boot|/etc|/lib|/lib32|/lib64|/libx32|/sbin|/usr|/var|/lost+found|/proc|/sys|/dev|/run) continue ;;
    esac
    mkdir -p "$root$d"; mount --rbind "$d" "$root$d"
  done
  for d in /dev /proc /sys /run; do
    [ -d "$d" ] || continue
    mkdir -p "$root$d"; mount --rbind "$d" "$root$d"
  done
  for f in /etc/resolv.conf /etc/hosts /etc/passwd /etc/group /etc/ssl/certs/ca-certificates.crt; do
    [ -f "$f" ] || continue
    [ -e "$root$f" ] || { mkdir -p "$(dirname "$root$f")"; : > "$root$f"; }
    mount --bind "$f" "$root$f"
  done
  # The caller's PATH less a host Python manager's shims (pyenv's would shadow the root's
  # python3), then the root's own system folders.
  path=""; IFS=:
  for e in $PATH; do case "$e" in *"/.pyenv/"*|"") ;; *) path="$path${path:+:}$e" ;; esac; done
  unset IFS
  export PATH="$path:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  # chroot(1) starts in /: return to the caller's directory (every host folder but the
  # system ones exists inside; / otherwise).
  exec chroot "$root" /bin/bash -c 'cd -- "$0" 2>/dev/null || cd /; exec "$@"' "$cwd" "$@"
fi

root="${1:?usage: runtime/enter.sh ROOT COMMAND [ARGS...]}"; shift
[ "$#" -gt 0 ] || { echo "usage: runtime/enter.sh ROOT COMMAND [ARGS...]" >&2; exit 2; }
[ -f "$root/etc/retrain-runtime-root" ] || {
  echo "error: $root is not a TFX runtime root (make venv builds one: runtime/root.sh)" >&2; exit 127; }
root="$(cd "$root" && pwd -P)"
if [ "$(id -u)" = 0 ]; then ns=(unshare --mount --propagation private)
else ns=(unshare --user --map-root-user --mount --propagation private); fi
exec env -u LD_LIBRARY_PATH -u LD_PRELOAD "${ns[@]}" -- /bin/bash "${BASH_SOURCE[0]}" --in-namespace "$root" "$PWD" "$@"
