#!/usr/bin/env bash
# Creates the Debian 13 root the TFX runtime lives in on hosts whose glibc is older than the
# runtime's wheels need (ml-metadata and TFDV 1.21 are manylinux_2_39: Debian 12 has glibc
# 2.36, Ubuntu 22.04 2.35). From Debian's own packages, with debootstrap; the same package
# list as the image (runtime/packages.txt), then the image's own `system` step inside it.
# Idempotent: a finished root (its marker file) is left as it is.
#
#   runtime/root.sh ROOT
#
# Needs root (debootstrap); without it, use the image or a host with glibc 2.39+
# (docs/guides/setup.md).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${1:?usage: runtime/root.sh ROOT}"
MARKER=etc/retrain-runtime-root
SUITE=trixie
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [ -f "$root/$MARKER" ]; then exit 0; fi
[ "$(id -u)" = 0 ] || {
  echo "error: building the runtime's Debian 13 root needs root (debootstrap). Without root, run the" \
       "runtime image or use a host with glibc 2.39+ (docs/guides/setup.md)" >&2; exit 1; }
if ! command -v debootstrap >/dev/null; then
  echo "runtime: installing debootstrap (Debian's package)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
fi
# A half-made root (an interrupted debootstrap) is started again from nothing.
rm -rf "$root.partial"
mkdir -p "$(dirname "$root")"
packages="$(grep -v '^#' "$HERE/packages.txt" | paste -sd, -)"
echo "runtime: debootstrap $SUITE (Debian 13) into $root with $packages (about 80 s)" >&2
start=$SECONDS
debootstrap --variant=minbase --include="$packages" "$SUITE" "$root.partial" "$MIRROR" \
  > "$(dirname "$root")/debootstrap.log" 2>&1 || {
  echo "error: debootstrap failed; its log: $(dirname "$root")/debootstrap.log" >&2; tail -5 "$(dirname "$root")/debootstrap.log" >&2; exit 1; }
rm -rf "${root:?}"
mv "$root.partial" "$root"
echo "Debian 13 root of the TFX runtime, built by runtime/root.sh ($SUITE, $MIRROR)" > "$root/$MARKER"
# The image's own system step, inside the root (a no-op check when debootstrap included all).
"$HERE/enter.sh" "$root" "$HERE/install.sh" system
echo "runtime: Debian 13 root ready in $((SECONDS - start)) s: $root" >&2
