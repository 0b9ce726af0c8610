"""spawn: a warm runtime that cannot start is reported (with its log), never waited on forever."""

import pytest

from task_host import spawn


def test_a_runtime_that_exits_is_reported_with_its_log(tmp_path):
    log = tmp_path / "server.log"
    with pytest.raises(spawn.NotReady, match="exited") as e:
        # An interpreter that fails at once: the module does not exist there.
        spawn.start_warm_runtime(str(tmp_path / "s.sock"), python="/usr/bin/python3", cwd=str(tmp_path),
                                 env={"PATH": "/usr/bin", "PYTHONPATH": ""}, log=str(log), timeout_s=60)
    assert "No module named" in str(e.value) and "No module named" in log.read_text()


def test_a_runtime_that_never_answers_is_stopped_after_the_timeout(tmp_path):
    fake = tmp_path / "task_host"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "warm_server.py").write_text("import time\ntime.sleep(600)\n")  # listens on nothing
    with pytest.raises(spawn.NotReady, match="did not answer in 1 s"):
        spawn.start_warm_runtime(str(tmp_path / "s.sock"), python="/usr/bin/python3", cwd=str(tmp_path),
                                 env={"PATH": "/usr/bin"}, timeout_s=1, poll_s=0.1)
