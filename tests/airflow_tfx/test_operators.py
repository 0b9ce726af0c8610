"""TfxNodeOperator against a fake node runner: every outcome maps to the right task state."""

import os
import signal
import sys
import time

import pytest
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSkipException,
    AirflowTaskTimeout,
)

from airflow_tfx.operators import TfxNodeOperator, _drop_empty_options, failure_for_exit_code
from core import exit_codes

FAKE = os.path.join(os.path.dirname(__file__), "fake_node.py")


class _TI:
    def __init__(self):
        self.xcom = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


def _run(mode: str):
    op = TfxNodeOperator(task_id="Fake", node_id="Fake", workdir="/work", pipeline="taxi",
                         entrypoint=[sys.executable, FAKE, mode])
    ti = _TI()
    return op, ti, op.execute({"ti": ti})


# Airflow's task logger (structlog) writes to stdout outside a task runner: read it there.
def test_complete_node_returns_its_output_uris_and_streams_the_log(capsys):
    _, ti, out = _run("complete")
    assert out == {"model": ["/pipeline_root/Fake/model/7"]}
    assert ti.xcom["status"] == "complete"
    assert "fake node: args node run --workdir /work --pipeline taxi --run-id {{ run_id }} --node Fake" in capsys.readouterr().out


def test_cached_node_succeeds_and_says_so(capsys):
    _, ti, out = _run("cached")
    assert ti.xcom["status"] == "cached" and out["model"]
    assert "CACHED: Fake reused the outputs of execution 7" in capsys.readouterr().out


def test_node_skipped_by_the_pipeline_condition_is_skipped():
    with pytest.raises(AirflowSkipException, match="skipped by the pipeline"):
        _run("skipped")


def test_failing_node_fails_with_the_cause_and_may_retry():
    with pytest.raises(AirflowException, match="the executor broke") as info:
        _run("failed")
    assert not isinstance(info.value, AirflowFailException)


def test_data_gate_stop_fails_without_retry():
    with pytest.raises(AirflowFailException, match="data gate stopped"):
        _run("gate")


def test_timeout_kills_the_whole_process_group(tmp_path, monkeypatch):
    pid_file = tmp_path / "pids"
    monkeypatch.setenv("FAKE_PID_FILE", str(pid_file))

    def timeout(signum, frame):  # what Airflow's execution_timeout does to a running task
        raise AirflowTaskTimeout("Timeout, PID: test")

    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(3)
    try:
        with pytest.raises(AirflowTaskTimeout):
            _run("hang")
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
    (exit_codes.GATE_STOPPED, AirflowFailException, "data gate stopped this span (no retry)"),
    (exit_codes.AWAITING_APPROVAL, AirflowFailException, "no reviewer decision"),
    (137, AirflowException, "failed with exit code 137"),  # killed (OOM): may be retried
])
def test_exit_code_to_airflow_state(rc, exception, says):
    """Retried (AirflowException) only where a retry can help; the tail of the log rides along."""
    error = failure_for_exit_code(rc, "last log line")
    assert type(error) is exception
    assert says in str(error) and "last log line" in str(error)
