"""scripts/services.sh and process groups it no longer owns: a recorded group id whose process
is now someone else's (pids are reused after a reboot or a restored machine) is not a
running server, and `stop` leaves that process alone."""

import os
import signal
import subprocess

SERVICES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "scripts", "services.sh")


def test_a_reused_group_id_is_not_a_running_server_and_is_never_signalled(tmp_path):
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)  # leads its own group, like a server
    try:
        (tmp_path / "redis.pgid").write_text(str(stranger.pid))
        env = {**os.environ, "RETRAIN_SERVICES": str(tmp_path)}
        status = subprocess.run([SERVICES, "status"], env=env, capture_output=True, text=True, check=True).stdout
        assert "redis: stopped" in status
        subprocess.run([SERVICES, "stop", "redis"], env=env, capture_output=True, text=True, check=True)
        assert stranger.poll() is None  # still alive: not ours to stop
        assert not (tmp_path / "redis.pgid").exists()  # the stale record is dropped
    finally:
        os.killpg(stranger.pid, signal.SIGKILL)
        stranger.wait()
