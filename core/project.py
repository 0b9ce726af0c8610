"""Where the project's own files are: the one place that works out the repository root.

Package code asks here (scripts and benchmarks that must find the root before they can
import anything keep their own two lines). In the container image the root is /app.
"""

from __future__ import annotations

import os

# The folder holding setup.py, core/, pipelines/ ...: this file's grandparent.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The project's packaging (a dependency for Beam workers outside this process).
SETUP_FILE = os.path.join(ROOT, "setup.py")


def path(*parts: str) -> str:
    """A path inside the project, e.g. `path("data", "taxi")`."""
    return os.path.join(ROOT, *parts)
