"""TfxNodeOperator against a fake node runner: every outcome maps to the right task state, the
same whether the command runs in a cold interpreter or forks from the warm TFX runtime."""

import os
import signal
import subprocess
import sys
import time

import pytest
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSkipException,
    AirflowTaskTimeout,
)

from airflow_tfx.compiled_dag import REPO
from airflow_tfx.hooks import drop_empty_options as _drop_empty_options
from airflow_tfx.operators import TfxNodeOperator
from airflow_tfx.outcomes import failure_for_exit_code
from core import exit_codes
from task_host import client as warm

FAKE = os.path.join(os.path.dirname(__file__), "fake_node.py")
FAKE_MODULE = "tests.airflow_tfx.fake_node"
TFX_PYTHON = os.path.join(REPO, ".venv", "bin", "python")


@pytest.fixture(scope="module")
def warm_socket(tmp_path_factory):
    """A warm TFX runtime (light preload: the protocol is what is tested here) that may run the fake."""
    sock = str(tmp_path_factory.mktemp("warm") / "tfx.sock")
    proc = subprocess.Popen([TFX_PYTHON, "-m", "task_host.warm_server", "--socket", sock, "--preload", "core.results",
                             "--modules", f"retrain.cli,{FAKE_MODULE}"], cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while warm.ping(sock) is None:
        assert proc.poll() is None and time.monotonic() < deadline, "warm runtime did not start"
        time.sleep(0.2)
    yield sock
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


@pytest.fixture(params=["cold", "warm"])
def runtime(request, monkeypatch):
    """How `_run` starts the fake: a cold interpreter, or forked by the warm runtime."""
    if request.param == "cold":
        monkeypatch.delenv(warm.SOCKET_ENV, raising=False)

        def cold(mode):
            return [sys.executable, FAKE, mode]
        cold.warm = False
        return cold
    monkeypatch.setenv(warm.SOCKET_ENV, request.getfixturevalue("warm_socket"))

    def warm_command(mode):
        return [TFX_PYTHON, "-m", FAKE_MODULE, mode]
    warm_command.warm = True
    return warm_command


class _TI:
    def __init__(self):
        self.xcom = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


def _run(mode: str, entrypoint: list[str] | None = None):
    op = TfxNodeOperator(task_id="Fake", node_id="Fake", workdir="/work", pipeline="taxi",
                         entrypoint=entrypoint or [sys.executable, FAKE, mode])
    ti = _TI()
    return op, ti, op.execute({"ti": ti})


# Airflow's task logger (structlog) writes to stdout outside a task runner: read it there.
def test_complete_node_returns_its_output_uris_and_streams_the_log(capsys, runtime):
    _, ti, out = _run("complete", runtime("complete"))
    assert out == {"model": ["/pipeline_root/Fake/model/7"]}
    assert ti.xcom["status"] == "complete"
    out = capsys.readouterr().out
    assert "fake node: args node run --workdir /work --pipeline taxi --run-id {{ run_id }} --node Fake" in out
    assert ("warm TFX runtime: started as process group" in out) == runtime.warm


def test_cached_node_succeeds_and_says_so(capsys, runtime):
    _, ti, out = _run("cached", runtime("cached"))
    assert ti.xcom["status"] == "cached" and out["model"]
    assert "CACHED: Fake reused the outputs of execution 7" in capsys.readouterr().out


def test_node_skipped_by_the_pipeline_condition_is_skipped(runtime):
    with pytest.raises(AirflowSkipException, match="skipped by the pipeline"):
        _run("skipped", runtime("skipped"))


def test_failing_node_fails_with_the_cause_and_may_retry(runtime):
    with pytest.raises(AirflowException, match="the executor broke") as info:
        _run("failed", runtime("failed"))
    assert not isinstance(info.value, AirflowFailException)


def test_data_gate_stop_fails_without_retry(runtime):
    with pytest.raises(AirflowFailException, match=r"stopped this span \(no retry\)(.|\n)*DataGateError"):
        _run("gate", runtime("gate"))


def test_timeout_kills_the_whole_process_group(tmp_path, monkeypatch, runtime):
    pid_file = tmp_path / "pids"
    monkeypatch.setenv("FAKE_PID_FILE", str(pid_file))

    def timeout(signum, frame):  # what Airflow's execution_timeout does to a running task
        raise AirflowTaskTimeout("Timeout, PID: test")

    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(3)
    try:
        with pytest.raises(AirflowTaskTimeout):
            _run("hang", runtime("hang"))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    pids = [int(p) for p in pid_file.read_text().split()]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids), "node process or its child survived the timeout"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped) counts as gone.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1][0] != "Z"


def test_blank_optional_params_are_dropped():
    assert _drop_empty_options(["run", "--span", "", "--window", "3", "--x", "None"]) == [
        "run", "--window", "3"]


@pytest.mark.parametrize(("rc", "exception", "says"), [
    (exit_codes.FAILED, AirflowException, "failed with exit code 1"),
    (exit_codes.BAD_INPUT, AirflowFailException, "bad input (no retry)"),
    (exit_codes.GATE_STOPPED, AirflowFailException, "the data gate, or serving skew set to block) stopped this span (no retry)"),
    (exit_codes.AWAITING_APPROVAL, AirflowFailException, "no reviewer decision"),
    (137, AirflowException, "failed with exit code 137"),  # killed (OOM): may be retried
])
def test_exit_code_to_airflow_state(rc, exception, says):
    """Retried (AirflowException) only where a retry can help; the tail of the log rides along."""
    error = failure_for_exit_code(rc, "last log line")
    assert type(error) is exception
    assert says in str(error) and "last log line" in str(error)
