import os
import subprocess
import sys

import pytest

from task_host import proctitle

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("title, shown", [
    ("proctitle.node_title('taxi', 'Trainer', 'manual__1')", "retrain taxi/Trainer run=manual__1"),
    ("proctitle.command_title('retrain', ['x' * 500])", "retrain: " + "x" * (proctitle.MAX_TITLE - 12) + "..."),
])
def test_a_process_shows_its_title_in_ps(title, shown):
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; from task_host import proctitle;"
         f" ok = proctitle.set_title({title}); print(ok, flush=True); sys.stdin.read()"],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "True"
        ps = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(child.pid)], capture_output=True, text=True,
                            check=True)
        assert ps.stdout.strip() == shown
    finally:
        child.stdin.close()
        child.wait(timeout=30)
