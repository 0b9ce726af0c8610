"""Thin operators for `retrain` commands, as in Airflow's providers: templated fields and
`execute`. How a command runs is the hook's (airflow_tfx/hooks.py: the warm runtime or a
cold interpreter, output streamed to the task log); what its answer means for the task is
an outcome (airflow_tfx/outcomes.py), the same for a process and for a pod (pods.py).

A node's result comes back as the last stdout line, `RESULT {json}`: complete and cached
nodes succeed (cached ones say so), a node the pipeline's condition skipped is marked
*skipped*, a data-gate stop fails without retries, any other failure fails with the cause.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, BaseSensorOperator
from airflow.sdk.exceptions import AirflowSkipException

from airflow_tfx import outcomes
from airflow_tfx.compiled_dag import REPO
from airflow_tfx.hooks import CommandRun, TfxRuntimeHook
from airflow_tfx.links import GovernanceReportLink
from core import exit_codes
from core.results import NodeResult


class RetrainTask:
    """What every `retrain` task does, however its command runs (TfxRuntimeHook here, a pod
    in airflow_tfx/pods.py): skip when its run never started, `run_command`, then its
    `outcome` (airflow_tfx/outcomes.py) maps the exit code and the `RESULT` line to the
    task's state. Operators only add their templated fields and which outcome applies."""

    skip_with: str | None = None
    outcome = staticmethod(outcomes.command)

    def execute(self, context: Any) -> Any:
        self.skip_if_run_never_started(context)
        return self.finish(context, *self.run_command(context))

    def finish(self, context: Any, rc: int, lines: list[str], result: NodeResult | None) -> Any:
        return self.outcome(self, context, CommandRun(rc, lines, result))

    def skip_if_run_never_started(self, context: Any) -> None:
        """A task whose `skip_with` task was skipped (its span never arrived) has nothing to
        read: skipped too, instead of failing on a run that does not exist."""
        if not self.skip_with:
            return
        ti = context["ti"]
        states = ti.get_task_states(dag_id=ti.dag_id, task_ids=[self.skip_with], run_ids=[ti.run_id])
        if (states.get(ti.run_id) or {}).get(self.skip_with) == "skipped":
            raise AirflowSkipException(f"{self.skip_with} was skipped: this run never started (see its log)")


def node_arguments(node_id: str, workdir: str, pipeline: str) -> list[str]:
    """`retrain node run` for one node of the task's run. The run folder is found from the
    run id: no XCom needed, so a task can be cleared and re-run on its own."""
    return ["node", "run", "--workdir", workdir, "--pipeline", pipeline, "--run-id", "{{ run_id }}",
            "--node", node_id]


class TfxRuntimeOperator(RetrainTask, BaseOperator):
    """Runs `retrain <arguments>` in the TFX runtime (TfxRuntimeHook); the task fails if the
    command does. Every task links to its run's governance report ("Governance report")."""

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
        self._hook: TfxRuntimeHook | None = None

    @property
    def hook(self) -> TfxRuntimeHook:
        if self._hook is None:
            self._hook = TfxRuntimeHook(self.entrypoint, task_log=self.log)
        return self._hook

    def run_command(self, context: Any) -> CommandRun:
        return self.hook.run(self.arguments)

    def on_kill(self) -> None:
        self.hook.kill()


class RunSummaryOperator(TfxRuntimeOperator):
    """The run's summary; alerts on a refused candidate (outcomes.summary)."""

    template_fields: Sequence[str] = ("arguments", "span")
    outcome = staticmethod(outcomes.summary)

    def __init__(self, *, alert_settings: dict, span: str, **kwargs):
        super().__init__(**kwargs)
        self.alert_settings = alert_settings
        self.span = span


class RolloutDecisionOperator(TfxRuntimeOperator):
    """The rollout controller's decision; alerts on promotions, roll-backs and the floor."""

    ui_color = "#eaf7e8"
    outcome = staticmethod(outcomes.rollout)

    def __init__(self, *, alert_settings: dict, **kwargs):
        super().__init__(**kwargs)
        self.alert_settings = alert_settings


class TfxNodeOperator(TfxRuntimeOperator):
    """Runs one node of a prepared pipeline run through TFX's portable launcher."""

    template_fields: Sequence[str] = ("arguments", "tfx_node_id")
    ui_color = "#fff3d6"
    outcome = staticmethod(outcomes.node)

    def __init__(self, *, node_id: str, workdir: str, pipeline: str, **kwargs):
        super().__init__(pipeline=pipeline, arguments=node_arguments(node_id, workdir, pipeline), **kwargs)
        self.tfx_node_id = node_id


class SpanWaitSensor(BaseSensorOperator):
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
        self._hook: TfxRuntimeHook | None = None

    @property
    def hook(self) -> TfxRuntimeHook:
        if self._hook is None:
            self._hook = TfxRuntimeHook(task_log=self.log)
        return self._hook

    def on_kill(self) -> None:
        self.hook.kill()

    def poke(self, context: Any) -> bool:
        rc, lines, _ = self.hook.run(self.arguments)
        if rc == exit_codes.NOT_YET:
            return False
        if rc != exit_codes.OK:
            raise outcomes.failure_for_exit_code(rc, "\n".join(lines[-5:]))
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
