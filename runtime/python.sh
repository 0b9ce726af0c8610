#!/bin/bash
# The TFX runtime's interpreter, as `.venv/bin/python` and `.venv/bin/python3` of a runtime
# built in a Debian 13 root (runtime/root.sh; make venv installs this file there, with ROOT
# and ENTER filled in). Every entry point reaches the runtime through it: `retrain` and the
# other console scripts (their #! line names it), the Airflow hook, the warm runtime, the tests.
# Inside the root it is the venv's Python; on the host it enters the root first
# (runtime/enter.sh), with the same arguments and working directory.
if [ -f /etc/retrain-runtime-root ]; then
  # argv[0] stays this path, so sys.executable and sys.prefix are the venv's, as with a
  # plain venv's symlink (children started from sys.executable come back here).
  exec -a "$0" "$(dirname -- "$0")/python3.13" "$@"
fi
exec "@ENTER@" "@ROOT@" "$0" "$@"
