"""Shared fixtures. Importing core.keras_env first routes tf.keras to tf-keras, as every
entry point does."""

import os
import shutil
import subprocess
import sys
import tempfile
import threading

import pytest

from core import keras_env  # noqa: F401  (before anything imports TensorFlow)
from task_host import client as warm
from task_host import spawn

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAXI_CONFIG = os.path.join(REPO, "pipelines", "taxi", "config.yaml")
TAXI_SCHEMA = os.path.join(REPO, "schemas", "taxi", "schema.pbtxt")
TAXI_DATA = os.path.join(REPO, "data", "taxi")
TESTDATA = os.path.join(REPO, "tests", "testdata")
DIGITS_CONFIG = os.path.join(REPO, "pipelines", "digits", "config.yaml")
DIGITS_DATA = os.path.join(REPO, "data", "digits")


_WARM: dict = {}  # this test session's warm TFX runtime: socket, process, folder
_WARM_LOCK = threading.Lock()


def _warm_socket() -> str | None:
    """The socket of this session's warm TFX runtime, started on first use; None with
    RETRAIN_TEST_COLD=1 or where it did not start (then commands run cold)."""
    if os.environ.get("RETRAIN_TEST_COLD") == "1":
        return None
    with _WARM_LOCK:
        if "socket" not in _WARM:
            root = tempfile.mkdtemp(prefix="retrain-warm-")
            sock = os.path.join(root, "tfx.sock")
            try:
                proc = spawn.start_warm_runtime(sock, log=os.path.join(root, "server.log"))
            except spawn.NotReady:
                proc, sock = None, None
            _WARM.update(socket=sock, proc=proc, root=root)
        return _WARM["socket"]


def retrain_cli(*args: str, env: dict | None = None, cwd: str = REPO, timeout: int = 900) -> subprocess.CompletedProcess:
    """`python -m retrain.cli <args>`, as `subprocess.run(..., capture_output=True, text=True)`
    gives it, forked from this session's warm TFX runtime: the ~18 s of imports are paid once,
    as Airflow's tasks pay them (tests/task_host/test_warm_server.py shows warm and cold runs
    give the same results). Cold with RETRAIN_TEST_COLD=1 or where the runtime refuses."""
    cmd = [sys.executable, "-m", "retrain.cli", *args]
    env = dict(os.environ if env is None else env)
    sock = _warm_socket()
    if sock:  # what the command starts in turn (the serving check's server) is forked warm too, as in Airflow
        env.setdefault(warm.SOCKET_ENV, sock)
    proc = warm.start(cmd, env, cwd, socket_path=sock, separate_stderr=True) if sock else None
    if proc is None:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    try:
        out, err = proc.communicate(timeout)
    except subprocess.TimeoutExpired:
        raise subprocess.TimeoutExpired(cmd, timeout) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def pytest_addoption(parser):
    parser.addoption("--shuffle", type=int, default=None, metavar="SEED",
                     help="run the collected tests in a random order drawn from SEED (order-dependence check)")


def pytest_collection_modifyitems(config, items):
    seed = config.getoption("--shuffle")
    if seed is not None:
        import random

        random.Random(seed).shuffle(items)


def pytest_report_header(config):
    seed = config.getoption("--shuffle")
    return None if seed is None else f"tests shuffled with seed {seed} (--shuffle)"



def pytest_sessionfinish(session, exitstatus):
    if _WARM.get("proc") is not None:
        spawn.stop(_WARM["proc"], timeout_s=30)
    if _WARM.get("root"):
        shutil.rmtree(_WARM["root"], ignore_errors=True)


def run_retrain(*args: str, timeout: int = 900):
    """`retrain <args>` (see retrain_cli): (exit code, JSON stdout or None, stderr)."""
    import json

    proc = retrain_cli(*args, timeout=timeout)
    out = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None
    return proc.returncode, out, proc.stderr


@pytest.fixture(scope="session")
def mariadb():
    """A MariaDB server for ML Metadata (scripts/services.sh: Debian's package, own data dir,
    127.0.0.1:13306; already running under `make test`). Returns `new_store(name)`: the
    environment (URL and password) of a fresh, empty database. A server this session
    started is stopped when it ends, so a pytest run outside `make test` leaves none behind
    (the next `make test` would find its port taken)."""
    import subprocess

    services = os.path.join(REPO, "scripts", "services.sh")
    status = subprocess.run([services, "status"], check=True, capture_output=True, text=True).stdout
    started_here = "mariadb: running" not in status
    subprocess.run([services, "start", "mariadb"], check=True, capture_output=True, text=True, timeout=600)
    exports = subprocess.run([services, "env"], check=True, capture_output=True, text=True).stdout
    env = dict(line[len("export "):].split("=", 1) for line in exports.splitlines() if line.startswith("export "))
    env = {k: v.strip("'") for k, v in env.items() if k.startswith("RETRAIN_METADATA")}

    def new_store(name: str) -> dict[str, str]:
        subprocess.run([services, "mariadb-db", name], check=True, capture_output=True, text=True, timeout=120)
        return {**env, "RETRAIN_METADATA_URL": env["RETRAIN_METADATA_URL"].rsplit("/", 1)[0] + f"/{name}"}

    yield new_store
    if started_here:
        subprocess.run([services, "stop", "mariadb"], check=True, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory):
    """One digits workdir shared by the digits e2e and governance tests, as a scheduled
    job's store would be: three embedded spans, and the first run (backfill, train,
    serving check, push) already done."""
    import shutil

    import yaml

    from core import spans

    root = tmp_path_factory.mktemp("digits")
    for s in (201604, 201605, 201606):
        shutil.copytree(spans.span_dir(DIGITS_DATA, s), spans.span_dir(str(root / "data"), s))
    with open(DIGITS_CONFIG) as f:
        cfg = yaml.safe_load(f)
    cfg.update(data_root=str(root / "data"), schema_path=os.path.join(REPO, "schemas", "digits", "schema.pbtxt"),
               gate_policy=os.path.join(REPO, "schemas", "digits", "gate.yaml"))
    (root / "digits.yaml").write_text(yaml.safe_dump(cfg))
    env = {"root": root, "data": str(root / "data"), "work": str(root / "work"), "config": str(root / "digits.yaml")}
    env["first"] = run_retrain("run", "--json", "--config", env["config"], "--workdir", env["work"], "--span", "201606")
    return env
