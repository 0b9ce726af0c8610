"""Awaiting a condition instead of sleeping a fixed time: a test waits exactly as long as
the thing takes, and says what it waited for when it never happened."""

from __future__ import annotations

import glob
import time
from typing import Any, Callable


def until(check: Callable[[], Any], seconds: float, what: str, ignore: tuple[type[BaseException], ...] = ()) -> Any:
    """`check()`'s first true answer, polled every 0.1 s; AssertionError naming `what` after
    `seconds`. Exceptions of the `ignore` types count as "not yet" (a server still starting)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            result = check()
            if result:
                return result
        except ignore:
            pass
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.1)


def request_logs_closed(prefix: str) -> bool:
    """No request-log file under `prefix` is still being written (each closes after the
    server's --request-log-max-file-seconds), so a reader sees every record logged so far."""
    # The TFX runtime's module, imported here: the Airflow suite imports this file too.
    from serving.server import request_log

    return not glob.glob(f"{glob.escape(prefix)}*{request_log.PART}")
