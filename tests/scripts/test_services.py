"""scripts/services.sh and process groups it no longer owns: a recorded group id whose process
is now someone else's (pids are reused after a reboot or a restored machine) is not a
running server, and `stop` leaves that process alone."""

import os
import pathlib
import shutil
import signal
import subprocess
import tempfile

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


def test_a_failed_start_names_the_closed_folder_and_stops_what_it_started():
    """PostgreSQL runs as the `postgres` user: under a folder closed to others (a 0700 home,
    a mkdtemp folder) it cannot reach its data. The start names that folder, and MariaDB,
    started before it in the same call, is stopped, so no port stays held for the next start."""
    # Under a folder open to others (pytest's own tmp_path base is 0700, which would be the one named).
    base = pathlib.Path(tempfile.mkdtemp(prefix="services-"))
    base.chmod(0o755)
    closed = base / "closed"
    closed.mkdir(mode=0o700)
    root = closed / "services"
    env = {**os.environ, "RETRAIN_SERVICES": str(root), "RETRAIN_MARIADB_PORT": "23306",
           "RETRAIN_POSTGRES_PORT": "25432"}
    try:
        start = subprocess.run([SERVICES, "start", "mariadb", "postgres"], env=env, capture_output=True, text=True,
                               timeout=300)
        assert start.returncode != 0
        assert f"the postgres user cannot reach {root} ({closed} is not open to others" in start.stderr, start.stderr
        assert "mariadb stopped" in start.stderr
        status = subprocess.run([SERVICES, "status"], env=env, capture_output=True, text=True, check=True).stdout
        assert "mariadb: stopped" in status and "postgres: stopped" in status
    finally:
        subprocess.run([SERVICES, "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(base, ignore_errors=True)
