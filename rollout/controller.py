"""One rollout decision: join the served versions' request logs with their delayed labels,
measure both versions over the same period, run the always-valid test, and act.

Outcomes (rollout/sequential.py): `promote` (stable moves to the canary's version),
`rollback` (the canary's label goes; its folder stays, marked rolled back) or `continue`.
Run-out rule: a canary still undecided when it has `max_labelled` labels or has run
`max_hours` gets `on_run_out` (default `estimate`: promoted when the point estimate of the
difference is above -max_regression / 2, the middle of the indifference zone, else rolled
back, as a truncated sequential test ends), and the reason says it ran out.

Every decision, `continue` included, is an MLMD execution of type `RolloutDecision`
whose inputs are both versions' Model artifacts, with the live metrics, counts and reason;
promotions and roll-backs also go into the model's `history.jsonl` (serving/repository/versions.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import getpass
import json
import math
import os
import time
from typing import Any

from core import layout, tasks
from core.finite import finite
from core.metadata_queries import ROLLOUT_DECISION as EXECUTION_TYPE
from rollout import feedback, join, live_metrics, sequential
from rollout.settings import RolloutSettings
from serving.repository import history, versions

PUSH_INFO = os.path.join("assets.extra", "push_info.json")
FLOOR_ALERT = "live_floor"


@dataclasses.dataclass
class Decision:
    model: str
    action: str
    reason: str
    metric: str
    stable: int
    canary: int
    live: dict[str, dict]  # "stable" / "canary" -> Tally.summary() + label delay
    difference: dict[str, float] | None  # estimate, low, high (None before min_labelled)
    counts: dict[str, int]
    rejected: list[str]
    ran_out: bool = False
    alerts: list[str] = dataclasses.field(default_factory=list)
    decided_by: str = "controller"
    decided_at: str = ""
    applied: bool = False

    def to_dict(self) -> dict[str, Any]:
        return finite(dataclasses.asdict(self))


def _log_prefix(serving_root: str, model: str, workdir: str) -> str:
    """Where the model's request logs are: its models.config logging_config, else the default."""
    path = versions.config_path(serving_root)
    if os.path.exists(path):
        from serving.repository import model_config

        entry = model_config.find(model_config.load(path), model)
        if entry is not None and entry.HasField("logging_config"):
            return entry.logging_config.log_collector_config.filename_prefix
    return layout.request_log_prefix(workdir, model)


def status(workdir: str, model: str) -> dict[str, Any]:
    """What serves now: stable, the canary under test (with its share and start) and the
    latest rollout events of the history."""
    serving_root = layout.serving_root(workdir)
    base = os.path.join(serving_root, model)
    config = versions.load_or_default(serving_root, model)
    from serving.repository import model_config

    entry = model_config.find(config, model)
    state = versions.rollout_state(base)
    events = [e for e in history.read(base) if e.get("event") in
              ("stable", "canary", "canary_superseded", "promote", "canary_rollback", "rollback", "release")]
    return {"model": model, "labels": dict(entry.version_labels), "canary": state, "history": events[-10:]}


def measure(workdir: str, model: str, task: str, settings: RolloutSettings, now: float | None = None) -> Decision | None:
    """The decision the evidence supports now (nothing is changed), or None with no canary.

    Raises:
      feedback.FeedbackError: a feedback file that cannot be used at all.
    """
    serving_root = layout.serving_root(workdir)
    base = os.path.join(serving_root, model)
    state = versions.rollout_state(base)
    if state is None:
        return None
    from serving.server import request_log  # TensorFlow: request logs are TFRecords of TF protos

    stable, canary = int(state["stable"]), int(state["canary"])
    metric = settings.metric_for(task)
    with join.Join(layout.rollout_dir(workdir, model), task) as db:
        db.ingest_logs(request_log.log_files(_log_prefix(serving_root, model, workdir)), request_log.read_file)
        db.ingest_feedback(feedback.files(layout.feedback_dir(workdir, model)))
        # Logs carry whole seconds: a request in the canary's first second counts too.
        joined = db.joined([stable, canary], since=math.floor(float(state.get("started_at") or 0)))
    tally_c, tally_s = joined.tallies[canary], joined.tallies[stable]
    live = {}
    for name, version, tally in (("stable", stable, tally_s), ("canary", canary, tally_c)):
        summary = tally.summary()
        delays = joined.delays.get(version) or []
        summary["version"] = version
        summary["label_delay_s"] = {"p50": delays[0], "p90": delays[1]} if delays else None
        live[name] = summary
    now = time.time() if now is None else now
    hours = (now - float(state.get("started_at") or now)) / 3600
    difference = ci = None
    margin = settings.margin(metric)
    if min(tally_c.count, tally_s.count) < settings.min_labelled:
        action = sequential.CONTINUE
        reason = (f"waiting for labels: canary {tally_c.count}, stable {tally_s.count} of the "
                  f"{settings.min_labelled} each needs before the test decides")
    else:
        estimate, variance = live_metrics.difference(tally_c, tally_s, metric)
        ci = sequential.interval(estimate, variance, settings.significance_level, settings.tau(metric))
        difference = {"estimate": ci.estimate, "low": ci.low, "high": ci.high}
        action = sequential.decide(ci, margin)
        what = "relative change" if metric in tasks.LOWER_IS_BETTER else "difference"
        shown = (f"{metric} {what} canary vs stable {ci.estimate:+.4f}, always-valid "
                 f"{100 * (1 - settings.significance_level):.0f}% interval [{ci.low:+.4f}, {ci.high:+.4f}] "
                 f"on {tally_c.count} canary and {tally_s.count} stable labels")
        reason = {
            sequential.PROMOTE: f"{shown}: no worse than the allowed regression {margin}",
            sequential.ROLLBACK: f"{shown}: the canary is worse",
            sequential.CONTINUE: f"{shown}: not decided yet",
        }[action]
    ran_out = False
    if action == sequential.CONTINUE and (tally_c.count >= settings.max_labelled or hours >= settings.max_hours):
        ran_out = True
        action = sequential.run_out(ci, margin, settings.on_run_out)
        limit = (f"{tally_c.count} canary labels (max_labelled {settings.max_labelled})"
                 if tally_c.count >= settings.max_labelled else f"{hours:.1f} h (max_hours {settings.max_hours})")
        reason = (f"ran out after {limit} without a decision; the run-out rule ({settings.on_run_out}) says "
                  f"{action}: {reason}")
    alerts = []
    floor = settings.live_floor
    stable_value = live["stable"][metric]["value"]
    if floor is not None and tally_s.count >= settings.min_labelled and math.isfinite(stable_value):
        below = stable_value > floor if metric in tasks.LOWER_IS_BETTER else stable_value < floor
        if below:
            alerts.append(f"{FLOOR_ALERT}: stable version {stable} live {metric} {stable_value:.4f} is past the "
                          f"floor {floor}")
    return Decision(model=model, action=action, reason=reason, metric=metric, stable=stable, canary=canary,
                    live=live, difference=difference, counts=joined.counts, rejected=joined.rejected_examples,
                    ran_out=ran_out, alerts=alerts,
                    decided_at=dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat(timespec="seconds"))


def apply(workdir: str, decision: Decision, store=None, by: str | None = None) -> Decision:
    """Acts on a decision: models.config and the history for promote/rollback, and an MLMD
    execution for every decision (when `store`, an open MetadataStore, is given)."""
    decision.decided_by = by or decision.decided_by
    serving_root = layout.serving_root(workdir)
    if decision.action in (sequential.PROMOTE, sequential.ROLLBACK):
        versions.end_canary(serving_root, decision.model, promote=decision.action == sequential.PROMOTE,
                            reason=decision.reason, user=decision.decided_by, metric=decision.metric,
                            difference=finite(decision.difference),
                            labelled={"stable": decision.live["stable"]["labelled"],
                                      "canary": decision.live["canary"]["labelled"]})
        decision.applied = True
    if store is not None:
        record(store, workdir, decision)
    return decision


def model_artifact_id(workdir: str, model: str, version: int) -> int | None:
    """The Model artifact a served version was pushed from (its push_info.json)."""
    path = os.path.join(layout.serving_root(workdir), model, str(version), PUSH_INFO)
    try:
        with open(path, encoding="utf-8") as f:
            return int(json.load(f)["model_artifact_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record(store, workdir: str, decision: Decision) -> int:
    """The decision as an MLMD execution; returns its id."""
    from ml_metadata.proto import metadata_store_pb2

    from core import metadata_queries

    type_id = store.put_execution_type(metadata_store_pb2.ExecutionType(name=EXECUTION_TYPE))
    execution = metadata_store_pb2.Execution(type_id=type_id)
    execution.last_known_state = metadata_store_pb2.Execution.COMPLETE
    metadata_queries.set_props(execution, {
        "model": decision.model, "action": decision.action, "reason": decision.reason, "metric": decision.metric,
        "stable_version": decision.stable, "canary_version": decision.canary, "decided_by": decision.decided_by,
        "decided_at": decision.decided_at, "ran_out": int(decision.ran_out), "applied": int(decision.applied),
        "live": json.dumps(finite(decision.live), sort_keys=True),
        "difference": json.dumps(finite(decision.difference), sort_keys=True),
        "counts": json.dumps(decision.counts, sort_keys=True),
    })
    artifacts = []
    for role, version in (("stable", decision.stable), ("canary", decision.canary)):
        artifact_id = model_artifact_id(workdir, decision.model, version)
        if artifact_id is not None and store.get_artifacts_by_id([artifact_id]):
            artifacts.append((role, artifact_id))
    events = []
    for role, artifact_id in artifacts:
        event = metadata_store_pb2.Event(artifact_id=artifact_id, type=metadata_store_pb2.Event.INPUT)
        step = event.path.steps.add()
        step.key = role
        events.append(event)
    [execution_id] = store.put_executions([execution])
    for event in events:
        event.execution_id = execution_id
    if events:
        store.put_events(events)
    return execution_id


def decisions(store, model: str) -> list[dict[str, Any]]:
    """Every recorded decision of a model, oldest first."""
    from core import metadata_queries

    return metadata_queries.rollout_decisions(store, model)


def user() -> str:
    return os.environ.get("RETRAIN_USER") or getpass.getuser()
