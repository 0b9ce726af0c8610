"""One rollout decision: join the served versions' request logs with their delayed labels,
measure both versions on the same population over the same period, run the always-valid
test, and act.

Outcomes (rollout/verdict.py): `promote` (stable moves to the canary's version), `rollback`
(the canary's label goes; its folder stays, marked rolled back), `continue`, or
`inconclusive`: the canary holds and an alert asks a person to decide (a canary still
undecided at its budget, `max_labelled` mature canary labels or `max_hours`, under the
default run-out rule; or a sample-ratio mismatch).

Every decision, `continue` and `inconclusive` included, is an MLMD execution of type
`RolloutDecision` whose inputs are both versions' Model artifacts, with the live metrics,
counts and reason, and the evidence an auditor re-derives it from: `test` (the statistic,
threshold and labels per arm), `srm`, `routing` and `maturity`. Promotions and roll-backs
also go into the model's `history.jsonl` (serving/repository/versions.py).
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
from rollout import feedback, join, sequential, srm, verdict
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
    # The evidence (None in decisions recorded before they were kept): the test's statistic,
    # threshold and labels per arm; the sample-ratio check; requests by route; maturity.
    test: dict | None = None
    srm: dict | None = None
    routing: dict | None = None
    maturity: dict | None = None
    blocked_by: str | None = None

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
    share = float(state["canary_share"])
    metric = settings.metric_for(task)
    now = time.time() if now is None else now
    with join.Join(layout.rollout_dir(workdir, model), task) as db:
        db.ingest_logs(request_log.log_files(_log_prefix(serving_root, model, workdir)), request_log.read_file)
        db.ingest_feedback(feedback.files(layout.feedback_dir(workdir, model)))
        # Logs carry whole seconds: a request in the canary's first second counts too.
        compared = db.compare(stable, canary, share, since=math.floor(float(state.get("started_at") or 0)), now=now,
                              quantile=settings.maturity_quantile)
    tallies = compared.tallies
    live = {}
    for name, version in (("stable", stable), ("canary", canary)):
        summary = tallies[name].summary()
        delays = compared.delays.get(name) or []
        summary["version"] = version
        summary["label_delay_s"] = {"p50": delays[0], "p90": delays[1]} if delays else None
        live[name] = summary
    hours = (now - float(state.get("started_at") or now)) / 3600
    ratio = srm.check(compared.requests["stable"], compared.requests["canary"], share, settings.srm_alpha)
    labelled, mature = compared.maturity["labelled"], compared.maturity["mature_labelled"]
    young = {name: labelled[name] - mature[name] for name in labelled}
    result = verdict.judge(tallies["canary"], tallies["stable"], metric, settings, hours, ratio, young)
    alerts = list(result.alerts)
    floor = settings.live_floor
    stable_value = live["stable"][metric]["value"]
    if floor is not None and tallies["stable"].count >= settings.min_labelled and math.isfinite(stable_value):
        below = stable_value > floor if metric in tasks.LOWER_IS_BETTER else stable_value < floor
        if below:
            alerts.append(f"{FLOOR_ALERT}: stable version {stable} live {metric} {stable_value:.4f} is past the "
                          f"floor {floor}")
    test = result.test
    if test is not None:
        test = {**test, "versions": {"stable": stable, "canary": canary}}
    return Decision(model=model, action=result.action, reason=result.reason, metric=metric, stable=stable,
                    canary=canary, live=live, difference=result.difference, counts=compared.counts,
                    rejected=compared.rejected_examples, ran_out=result.ran_out, alerts=alerts,
                    decided_at=dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat(timespec="seconds"),
                    test=test, srm=ratio.to_dict(), routing=compared.routing, maturity=compared.maturity,
                    blocked_by=result.blocked_by)


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
        **{name: json.dumps(finite(getattr(decision, name)), sort_keys=True)
           for name in ("test", "srm", "routing", "maturity", "alerts")},
    })
    if decision.blocked_by:
        metadata_queries.set_props(execution, {"blocked_by": decision.blocked_by})
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
