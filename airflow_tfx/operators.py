"""Operators that run `retrain` commands in the TFX runtime and stream their output to the task log.

The TFX runtime is another Python (locally the project's `.venv`, in production a
container image); Airflow only starts it and reads what it prints. A node's result
comes back as the last stdout line, `RESULT {json}`: complete and cached nodes succeed
(cached ones say so), a node the pipeline's condition skipped is marked *skipped*, a
data-gate stop fails without retries, any other failure fails with the cause in the log.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import signal
import subprocess
import urllib.parse
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, BaseSensorOperator
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowNotFoundException,
    AirflowSkipException,
)

from airflow_tfx.links import GovernanceReportLink
from airflow_tfx.template import REPO
from core import exit_codes, metadata
from core.results import CACHED, FAILED, SKIPPED, NodeResult, parse_result_line
from task_host import client as warm

# Which interpreter runs TFX work: read when a task runs, never at DAG-parse time.
TFX_PYTHON_ENV = "RETRAIN_TFX_PYTHON"
DEFAULT_TFX_PYTHON = os.path.join(REPO, ".venv", "bin", "python")


# ML Metadata's URL with its password, when the deployment keeps it in an Airflow
# connection (else the worker's RETRAIN_METADATA_URL / RETRAIN_METADATA_PASSWORD apply).
METADATA_CONN_ID = "retrain_metadata"


def metadata_env() -> dict[str, str]:
    """The TFX runtime's metadata settings from the `retrain_metadata` connection, if any.

    Handed to the child process in its environment: never on its command line (which the
    task log shows), never in a template or the run folder.
    """
    from airflow.sdk import Connection

    try:
        conn = Connection.get(METADATA_CONN_ID)
    except AirflowNotFoundException:
        return {}
    # Built from the fields (the URI scheme depends on which providers are installed).
    user = urllib.parse.quote(conn.login or "", safe="")
    password = urllib.parse.quote(conn.password or "", safe="")
    where = f"{conn.host}:{conn.port or 3306}" if conn.host else ""
    query = f"?socket={urllib.parse.quote(conn.extra_dejson['socket'])}" if conn.extra_dejson.get("socket") else ""
    return {metadata.URL_ENV: f"mysql://{user}:{password}@{where}/{conn.schema}{query}"}


def tfx_entrypoint() -> list[str]:
    """The command prefix that runs the `retrain` CLI in the TFX runtime."""
    return [os.environ.get(TFX_PYTHON_ENV, DEFAULT_TFX_PYTHON), "-m", "retrain.cli"]


def _drop_empty_options(args: Sequence[str]) -> list[str]:
    """Removes `--flag ""` pairs, so templated optional Params can be left blank."""
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i].startswith("--") and i + 1 < len(args) and args[i + 1] in ("", "None"):
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out


# Exit code -> (Airflow exception, what the task log says). AirflowFailException fails the
# task without retries: a verdict on the data or a missing decision does not change on retry.
_FAILURES = {
    exit_codes.GATE_STOPPED: (AirflowFailException, "a data check (the data gate, or serving skew set to block) "
                                                    "stopped this span (no retry)"),
    exit_codes.BAD_INPUT: (AirflowFailException, "bad input (no retry)"),
    exit_codes.AWAITING_APPROVAL: (AirflowFailException, "no reviewer decision recorded for this candidate (no retry)"),
}


def failure_for_exit_code(rc: int, tail: str) -> Exception:
    """The exception that ends a task whose command exited with `rc` (not 0)."""
    cls, what = _FAILURES.get(rc, (AirflowException, f"TFX runtime command failed with exit code {rc}"))
    return cls(f"{what}:\n{tail}")


class TfxRuntimeProcess:
    """Runs a command in the TFX runtime for a task, streaming its lines to the task log,
    in its own process group (a timeout or kill ends Beam's and TF's children too)."""

    _proc: subprocess.Popen | warm.WarmProcess | None = None

    def run_in_tfx_runtime(self, cmd: list[str]) -> tuple[int, list[str], NodeResult | None]:
        """Returns (exit code, output lines, the `RESULT` line's node result or None)."""
        self.log.info("TFX runtime: %s", shlex.join(cmd))
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **metadata_env()}
        # The warm runtime where one answers (a forked child of a process that has TensorFlow,
        # TFX and Beam imported: no ~15 s of imports), else a cold interpreter. Either way the
        # command is its own process group with its output streamed here.
        self._proc = warm.start(cmd, env, REPO, say=self.log.warning)
        if self._proc is not None:
            self.log.info("warm TFX runtime: started as process group %d", self._proc.pid)
        else:
            self._proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                cwd=REPO, start_new_session=True, env=env,
            )
        lines, result = [], None
        try:
            for line in self._proc.stdout:
                line = line.rstrip("\n")
                parsed = parse_result_line(line)
                if parsed is not None:
                    result = parsed
                else:
                    lines.append(line)
                    self.log.info("%s", line)
            rc = self._proc.wait()
        except BaseException:  # timeout (AirflowTaskTimeout) or kill: stop the whole group
            self.on_kill()
            raise
        return rc, lines, result

    def on_kill(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        self.log.warning("Stopping the TFX runtime process group %d", proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class RetrainTask:
    """What every `retrain` task does, however its command runs (a process here, a pod in
    airflow_tfx/pods.py): skip when its run never started, `run_command`, then `finish`
    (an *Outcome mixin, listed first in the class bases) maps the exit code and the
    `RESULT` line to the task's state."""

    skip_with: str | None = None

    def execute(self, context: Any) -> Any:
        self.skip_if_run_never_started(context)
        rc, lines, result = self.run_command(context)
        return self.finish(context, rc, lines, result)

    def skip_if_run_never_started(self, context: Any) -> None:
        """A task whose `skip_with` task was skipped (its span never arrived) has nothing to
        read: skipped too, instead of failing on a run that does not exist."""
        if not self.skip_with:
            return
        ti = context["ti"]
        states = ti.get_task_states(dag_id=ti.dag_id, task_ids=[self.skip_with], run_ids=[ti.run_id])
        if (states.get(ti.run_id) or {}).get(self.skip_with) == "skipped":
            raise AirflowSkipException(f"{self.skip_with} was skipped: this run never started (see its log)")


class CommandOutcome:
    """A plain command: fails as its exit code says; a JSON answer goes to XCom."""

    def finish(self, context: Any, rc: int, lines: list[str], result: NodeResult | None) -> Any:
        if rc != exit_codes.OK:
            raise failure_for_exit_code(rc, "\n".join(lines[-5:]))
        return last_json_line(lines)


class SummaryOutcome:
    """`retrain summary --outcome-line`: alerts when the candidate was refused (not blessed,
    failed serving check, rejected): the run finished, green, and nobody would know
    otherwise. Fails, as any task, when the pipeline did not finish."""

    alert_settings: dict
    span: str
    retrain_pipeline: str

    def finish(self, context: Any, rc: int, lines: list[str], result: NodeResult | None) -> Any:
        from airflow_tfx import alerts

        outcome = last_json_line(lines) or {}
        why = alerts.refusal(outcome)
        if why:
            ti = context["ti"]
            alerts.send(self.alert_settings, alerts.Alert(
                alerts.REFUSED, self.retrain_pipeline, str(outcome.get("span") or self.span), ti.run_id, why,
                ti.dag_id, ti.task_id), context, self.log)
        if rc != exit_codes.OK:
            raise failure_for_exit_code(rc, "\n".join(lines[-5:]))
        return outcome


class RolloutOutcome:
    """`retrain rollout decide --json`: the decision goes to XCom; a promotion, a roll-back
    and a live-quality floor crossed are sent as alerts. Fails as its exit code says."""

    alert_settings: dict
    retrain_pipeline: str

    def finish(self, context: Any, rc: int, lines: list[str], result: NodeResult | None) -> Any:
        from airflow_tfx import alerts

        if rc != exit_codes.OK:
            raise failure_for_exit_code(rc, "\n".join(lines[-5:]))
        decision = last_json_line(lines) or {}
        ti = context["ti"]
        for kind, reason in alerts.rollout_alerts(decision):
            alerts.send(self.alert_settings, alerts.Alert(kind, self.retrain_pipeline, None, ti.run_id, reason,
                                                          ti.dag_id, ti.task_id), context, self.log)
        return decision


class NodeOutcome:
    """`retrain node run`: the `RESULT` line decides. Complete and cached nodes succeed
    (cached ones say so), a node the pipeline's condition skipped is skipped, a data-gate
    stop fails without retries, any other failure fails with the cause in the log."""

    tfx_node_id: str

    def finish(self, context: Any, rc: int, lines: list[str], result: NodeResult | None) -> Any:
        if result is None:
            raise AirflowException(f"node {self.tfx_node_id} ended (exit code {rc}) without a result")
        status = result.status
        if status == FAILED:
            # The cause as the task log's last line, not only the exit code.
            self.log.error("%s failed: %s", self.tfx_node_id, result.error or "no error message")
            raise failure_for_exit_code(rc, "\n".join((lines + [result.error or ""])[-5:]))
        if status == SKIPPED:
            raise AirflowSkipException(
                f"{self.tfx_node_id} was skipped by the pipeline (its condition was false, "
                "e.g. the model was not blessed)"
            )
        outputs = {key: [a["uri"] for a in arts] for key, arts in result.outputs.items()}
        if status == CACHED:
            self.log.info(
                "CACHED: %s reused the outputs of execution %s; nothing was recomputed",
                self.tfx_node_id, result.execution_id,
            )
        for key, uris in outputs.items():
            self.log.info("output %s: %s", key, ", ".join(uris))
        context["ti"].xcom_push(key="status", value=status)
        return outputs


def node_arguments(node_id: str, workdir: str, pipeline: str) -> list[str]:
    """`retrain node run` for one node of the task's run. The run folder is found from the
    run id: no XCom needed, so a task can be cleared and re-run on its own."""
    return ["node", "run", "--workdir", workdir, "--pipeline", pipeline, "--run-id", "{{ run_id }}",
            "--node", node_id]


def last_json_line(lines: Sequence[str]) -> Any:
    """The last line that is a JSON object (commands that answer in JSON hand it to XCom)."""
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


class TfxRuntimeOperator(CommandOutcome, RetrainTask, TfxRuntimeProcess, BaseOperator):
    """Runs `retrain <arguments>` in the TFX runtime; the task fails if the command does.

    Every task links to its run's governance report ("Governance report" in the task's links).
    """

    template_fields: Sequence[str] = ("arguments",)
    ui_color = "#e8f4fa"
    operator_extra_links = (GovernanceReportLink(),)

    def __init__(
        self, *, arguments: Sequence[str], entrypoint: Sequence[str] | None = None,
        pipeline: str | None = None, skip_with: str | None = None, **kwargs,
    ):
        super().__init__(**kwargs)
        self.retrain_pipeline = pipeline
        self.arguments = list(arguments)
        self.entrypoint = list(entrypoint) if entrypoint else None
        self.skip_with = skip_with

    def command(self) -> list[str]:
        return (self.entrypoint or tfx_entrypoint()) + _drop_empty_options(self.arguments)

    def run_command(self, context: Any) -> tuple[int, list[str], NodeResult | None]:
        return self.run_in_tfx_runtime(self.command())


class RunSummaryOperator(SummaryOutcome, TfxRuntimeOperator):
    """The run's summary; alerts on a refused candidate (SummaryOutcome)."""

    template_fields: Sequence[str] = ("arguments", "span")

    def __init__(self, *, alert_settings: dict, span: str, **kwargs):
        super().__init__(**kwargs)
        self.alert_settings = alert_settings
        self.span = span


class RolloutDecisionOperator(RolloutOutcome, TfxRuntimeOperator):
    """The rollout controller's decision; alerts on promotions, roll-backs and the floor."""

    ui_color = "#eaf7e8"

    def __init__(self, *, alert_settings: dict, **kwargs):
        super().__init__(**kwargs)
        self.alert_settings = alert_settings


class TfxNodeOperator(NodeOutcome, TfxRuntimeOperator):
    """Runs one node of a prepared pipeline run through TFX's portable launcher."""

    template_fields: Sequence[str] = ("arguments", "tfx_node_id")
    ui_color = "#fff3d6"

    def __init__(self, *, node_id: str, workdir: str, pipeline: str, **kwargs):
        super().__init__(pipeline=pipeline, arguments=node_arguments(node_id, workdir, pipeline), **kwargs)
        self.tfx_node_id = node_id


class SpanWaitSensor(TfxRuntimeProcess, BaseSensorOperator):
    """Waits, without holding a worker slot between pokes, until the earlier spans a node
    reads are decided: `retrain wait --for baseline|window|models` (runner/span_ledger.py)."""

    template_fields: Sequence[str] = ("arguments",)
    ui_color = "#eeeeee"

    def __init__(self, *, what: str, workdir: str, pipeline: str, **kwargs):
        # Each poke is a task start and a `retrain wait` forked by the warm TFX runtime
        # (~0.2 s): back off (10 s, 20 s, then every 30 s), not to minutes, so a month waits at
        # most ~30 s after the one it waits on is decided.
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("poke_interval", 10)
        kwargs.setdefault("exponential_backoff", True)
        kwargs.setdefault("max_wait", dt.timedelta(seconds=30))
        kwargs.setdefault("timeout", 6 * 3600)
        super().__init__(**kwargs)
        self.what = what
        self.arguments = ["wait", "--workdir", workdir, "--pipeline", pipeline, "--run-id", "{{ run_id }}",
                          "--for", what, "--timeout", "0"]

    def poke(self, context: Any) -> bool:
        rc, lines, _ = self.run_in_tfx_runtime(tfx_entrypoint() + list(self.arguments))
        if rc == exit_codes.NOT_YET:
            return False
        if rc != exit_codes.OK:
            raise failure_for_exit_code(rc, "\n".join(lines[-5:]))
        return True


class EarlierRunsSensor(SpanWaitSensor):
    """The model phase in month order: waits until this DAG's runs of earlier months are no
    longer queued or running. Airflow's own record is the authority here: a finished DAG run
    pushes nothing more, whatever state its span claim was left in.

    Then the Evaluator's baseline is the model the previous month left, and pushes happen in
    month order: a late-finishing older month never replaces a newer served model.
    """

    def __init__(self, **kwargs):
        super().__init__(what="models", **kwargs)

    def poke(self, context: Any) -> bool:
        dag_run = context["dag_run"]
        if dag_run.logical_date is None:
            # A run per arrived span (data schedule) has no calendar month: the span ledger decides.
            return super().poke(context)
        earlier = earlier_month_starts(dag_run.logical_date, self.dag.start_date)
        open_runs = context["ti"].get_dr_count(dag_id=self.dag_id, logical_dates=earlier,
                                               states=["queued", "running"]) if earlier else 0
        if open_runs:
            self.log.info("%d run(s) of earlier months still open; the model phase waits", open_runs)
            return False
        return True


def earlier_month_starts(logical_date, start_date) -> list:
    """The logical dates of a monthly DAG's runs before `logical_date` (first of each month, UTC)."""
    import pendulum

    if logical_date is None or start_date is None:
        return []
    end = pendulum.instance(logical_date).in_timezone("UTC")
    month = pendulum.instance(start_date).in_timezone("UTC").start_of("month")
    out = []
    while month < end.start_of("month"):
        out.append(month)
        month = month.add(months=1)
    return out


class ProcessTasks:
    """How the DAG factory makes its tasks in the process mode: each command in the TFX
    runtime on the Airflow worker (the pod mode's twin: pods.PodTasks)."""

    def __init__(self, *, pipeline: str, workdir: str):
        self.pipeline, self.workdir = pipeline, workdir

    def path(self, repo_relative: str) -> str:
        """A project file as the TFX runtime sees it: in this checkout."""
        return os.path.join(REPO, repo_relative)

    def template(self, template_path: str) -> str:
        """The DAG's template, for prepare_run to check the pipeline code against."""
        return template_path

    def command(self, *, task_id: str, arguments: Sequence[str], **kwargs) -> TfxRuntimeOperator:
        return TfxRuntimeOperator(task_id=task_id, arguments=arguments, pipeline=self.pipeline, **kwargs)

    def summary(self, *, task_id: str, arguments: Sequence[str], **kwargs) -> RunSummaryOperator:
        return RunSummaryOperator(task_id=task_id, arguments=arguments, pipeline=self.pipeline, **kwargs)

    def node(self, *, node_id: str, **kwargs) -> TfxNodeOperator:
        return TfxNodeOperator(task_id=node_id, node_id=node_id, workdir=self.workdir, pipeline=self.pipeline,
                               **kwargs)

    def rollout(self, *, task_id: str, arguments: Sequence[str], **kwargs) -> RolloutDecisionOperator:
        return RolloutDecisionOperator(task_id=task_id, arguments=arguments, pipeline=self.pipeline, **kwargs)

    def span_wait(self, *, task_id: str, what: str, **kwargs) -> BaseOperator:
        if what == "models":
            return EarlierRunsSensor(task_id=task_id, workdir=self.workdir, pipeline=self.pipeline, **kwargs)
        return SpanWaitSensor(task_id=task_id, what=what, workdir=self.workdir, pipeline=self.pipeline, **kwargs)
