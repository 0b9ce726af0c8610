"""Process titles: what `ps`, `top` and `htop` show for each task process.

A command forked by the warm runtime would otherwise keep the server's command line
(`python -m task_host.warm_server ...`), so a Trainer could not be told from a Transform.
Every task process names itself instead:

    python -m task_host.warm_server ...            the warm runtime itself (unchanged)
    retrain-warm monitor: node run --node-id ...   the monitor of one forked command
    retrain: summary --run-folder ...              a forked command, by its own argv
    retrain taxi/Trainer run=scheduled__2016-...   one node of one run (warm, cold or pod)

`setproctitle` rewrites the process's argv area (what `ps -o args` shows) and, on Linux,
its comm name (`ps -o comm`, `top`), truncated there to 15 bytes.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)
# Titles longer than this are cut (argv areas are often only a few hundred bytes).
MAX_TITLE = 200


def set_title(title: str) -> bool:
    """Sets this process's title; False (and nothing changed) where setproctitle is missing."""
    try:
        import setproctitle
    except ImportError:  # an environment without it still runs its tasks
        log.debug("setproctitle is not installed: the process title stays %r", title)
        return False
    title = title if len(title) <= MAX_TITLE else title[: MAX_TITLE - 3] + "..."
    setproctitle.setproctitle(title)
    return True


def node_title(pipeline: str, node: str, run_id: str) -> str:
    """The title of a process running one node of one run."""
    return f"retrain {pipeline}/{node} run={run_id}"


def command_title(prefix: str, argv: list[str]) -> str:
    """`prefix: argv...` for a command a host runs."""
    return f"{prefix}: {' '.join(argv)}"
