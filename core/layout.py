"""Where a run's files live: the workdir, run folders, pipeline roots and reports.

    <workdir>/metadata/<pipeline>.sqlite              ML Metadata (SQLite)
    <workdir>/pipeline_root/<pipeline>/               TFX artifacts
    <workdir>/pipeline_root/<pipeline>/governance/<run>/report.{json,html}
    <workdir>/runs/<pipeline>/<run>/run.json          a run: inputs, pipeline.pb, nodes/<node>.json
    <workdir>/logs/<pipeline>-<run>.log               `retrain run`'s detailed log
    <workdir>/serving/<model>/<version>/              pushed SavedModels
    <workdir>/request_logs/<model>/log.<ms>.<n>.tfrecord  sampled requests (PredictionLog)
    <workdir>/feedback/<model>/*.jsonl|*.csv          delayed labels by request key (docs/rollout.md)
    <workdir>/rollout/<model>/join.sqlite             request logs joined with feedback

Run ids come from orchestrators (`scheduled__2016-12-01T00:00:00+00:00`) and are used as
folder names only through `safe_id`.
"""

from __future__ import annotations

import os
import re

from core import nodes

RUNS_DIR = "runs"
RUN_INFO = "run.json"
RUN_IR = "pipeline.pb"
NODES_DIR = "nodes"
REPORT_DIR = "governance"
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
# Files that nodes write into their output artifacts and that reports read back.
GATE_REPORT = "report.json"  # DataGate's report artifact
GATE_STOPPED_DIR = os.path.join(nodes.DATA_GATE, "stopped")  # reports of refused spans, under the pipeline root
SKEW_REPORT = "report.json"  # ServingSkew's report artifact
SKEW_STOPPED_DIR = os.path.join(nodes.SERVING_SKEW, "stopped")  # reports of runs it stopped
SIGNIFICANCE_FILE = "significance.json"  # the Evaluator's verdict, in its evaluation artifact
# The feature the Evaluator adds to each eval example, its span, so TFMA slices by span (the
# governance record lists those slices apart from the configured ones).
SPAN_SLICE_FEATURE = "__span__"
SERVING_CHECK_FILE = "serving_check.json"  # the serving check's report, in its blessing artifact

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_id(run_id: str) -> str:
    """A run id as a folder name: every character outside `A-Za-z0-9._-` becomes `_`."""
    return _UNSAFE.sub("_", str(run_id))


def pipeline_root(workdir: str, pipeline: str) -> str:
    return os.path.join(workdir, "pipeline_root", pipeline)


def metadata_path(workdir: str, pipeline: str) -> str:
    return os.path.join(workdir, "metadata", f"{pipeline}.sqlite")


def serving_root(workdir: str) -> str:
    return os.path.join(workdir, "serving")


def request_log_prefix(workdir: str, model: str) -> str:
    """The filename_prefix of a model's request logs (`retrain serve`, the serving skew check)."""
    return os.path.join(workdir, "request_logs", model, "log")


def feedback_dir(workdir: str, model: str) -> str:
    """Where delayed labels of a model's requests arrive (rollout/feedback.py)."""
    return os.path.join(workdir, "feedback", model)


def rollout_dir(workdir: str, model: str) -> str:
    """The rollout controller's own files for a model (its join database)."""
    return os.path.join(workdir, "rollout", model)


def run_dir(workdir: str, pipeline: str, run_id: str) -> str:
    """`<workdir>/runs/<pipeline>/<safe run id>` (two pipelines' DAGs share scheduled run ids)."""
    return os.path.join(workdir, RUNS_DIR, pipeline, safe_id(run_id))


def node_result_path(run_folder: str, node_id: str) -> str:
    return os.path.join(run_folder, NODES_DIR, f"{node_id}.json")


def report_dir(pipeline_root_dir: str, run_id: str) -> str:
    return os.path.join(pipeline_root_dir, REPORT_DIR, safe_id(run_id))


def log_path(workdir: str, pipeline: str, run_id: str) -> str:
    return os.path.join(workdir, "logs", f"{pipeline}-{run_id.replace(':', '')}.log")


def alerts_path(workdir: str, pipeline: str) -> str:
    """Every alert sent for the pipeline, a JSON line each (airflow_tfx/alerts.py appends;
    the Models view lists those since the last push as open)."""
    return os.path.join(workdir, "alerts", f"{pipeline}.jsonl")
