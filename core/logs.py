"""Logging set-up, done once per entry point (the CLI, the server, a node process).

Modules log through `logging.getLogger(__name__)` and never configure handlers; the entry
point calls `configure` with where its logs go (a file behind a progress display, or
stderr for an Airflow task log). TFX, Beam and TensorFlow log through absl, which is
routed to the same handler.
"""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure(stream=None, level: int = logging.INFO) -> None:
    """Sends every logger's records (and Python warnings) to `stream` (default stderr)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)
    try:
        import absl.logging  # TFX and TensorFlow log through absl (absent on the Airflow side)
    except ImportError:
        pass
    else:
        absl.logging.set_verbosity(absl.logging.INFO if level <= logging.INFO else absl.logging.WARNING)
    for name in ("absl", "tensorflow"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True

