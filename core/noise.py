"""Third-party noise, filtered at one place: warnings a user of this tool cannot act on.

Each entry names a library message by its start and says why it is noise here. Nothing
else is filtered: the project's own warnings, and any library warning not listed, still
show. Installed by `core.keras_env` (which every TFX-runtime entry point imports first)
and carried to child interpreters (Beam workers, node subprocesses, gRPC front ends)
through PYTHONWARNINGS, so each filter is written once.
"""

from __future__ import annotations

import logging
import os
import warnings

# (start of the message, category, why it is noise here).
WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    # (TFX 1.16's runtime needed two: google-api-core on Python 3.10, and google-cloud-storage
    # 2.x. On Python 3.13 with google-cloud-storage 3 neither is printed any more.)
)
# (logger, a part of the message, why): library log records of the same kind. Only
# WARNING records are dropped; errors always show.
LOGGED: tuple[tuple[str, str, str], ...] = (
    ("tensorflow", "is deprecated and will be removed",
     "TensorFlow's deprecation notices for TF's, TFX's and TFDV's own calls: a user can change none of them"),
    ("absl", "Fallback to non-ZetaSQL contexts execution query",
     "TFX 1.21's MLMD query for a node's executions, taken the other way since ml-metadata 1.21 "
     "dropped ZetaSQL: the same executions, printed once per node"),
    ("apache_beam.io.tfrecordio", "Couldn't find python-snappy",
     "Beam's hint about a faster CRC for TFRecords; the runtime's lock has no python-snappy"),
)


class _Drop(logging.Filter):
    """Drops a logger's WARNING records that contain one of `marks`; every other record passes."""

    def __init__(self, marks: tuple[str, ...]):
        super().__init__()
        self.marks = marks

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        message = record.getMessage()
        return not any(mark in message for mark in self.marks)


def quiet_third_party() -> None:
    """Installs the filters in this process and its future children. Idempotent."""
    entries = []
    for message, category, _why in WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
        entries.append(f"ignore:{message}:{category.__name__}")
    present = [e for e in os.environ.get("PYTHONWARNINGS", "").split(",") if e]
    os.environ["PYTHONWARNINGS"] = ",".join(present + [e for e in entries if e not in present])
    by_logger: dict[str, tuple[str, ...]] = {}
    for name, mark, _why in LOGGED:
        by_logger[name] = (*by_logger.get(name, ()), mark)
    for name, marks in by_logger.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Drop) for f in logger.filters):
            logger.addFilter(_Drop(marks))
