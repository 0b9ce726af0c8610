"""Who is working on which span: claims in ML Metadata that keep parallel runs equal to
sequential ones.

Runs of different months may run at once (several Airflow runs, several `retrain run`
processes on a MySQL store). Three things would then go wrong without coordination:
a span ingested twice (a run's backfill and that month's own run), a window or a drift
baseline resolved before an earlier span's gate has finished, and an older month's model
judged against, or pushed after, a newer one. The claims fix the first two, the waits the
rest:

* **A claim per span and attempt**: an MLMD execution of type `RetrainSpanClaim` named
  `<pipeline>:<span>:<attempt>`. MLMD's unique (type, name) index makes taking a claim
  atomic on SQLite and MySQL alike: of two runs that want the same span, one inserts the
  claim and the other gets AlreadyExists and waits for it. A claim is `run` (a month's own
  run, which goes on to train and push) or `backfill` (a run ingesting an earlier span for
  its window); it moves claimed -> gated (passed/stopped) -> finished.
* **Waits** before the nodes that read other spans' results: the drift baseline (the
  nearest earlier claimed span must be gated), the window (every claimed span of the
  window must be gated), and the model phase (every earlier month's run must be finished,
  so the Evaluator's baseline model and the push order are the sequential ones).

A span's next run takes attempt n+1 once attempt n is no longer active; the claim's owner
(the run id) taking it again is a no-op, so a retried task continues its own claim.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable

from ml_metadata import errors as mlmd_errors
from ml_metadata.proto import metadata_store_pb2

from core import metadata_queries, nodes, spans
from core.errors import BadInput

logger = logging.getLogger(__name__)

EXECUTION_TYPE = "RetrainSpanClaim"
RUN, BACKFILL = "run", "backfill"
CLAIMED, GATED, FINISHED = "claimed", "gated", "finished"
PASSED, STOPPED, FAILED = "passed", "stopped", "failed"
# What a node waits for before it runs, by node id.
BASELINE, WINDOW, MODELS = "baseline", "window", "models"
WAIT_BEFORE = {nodes.BASELINE_RESOLVER: BASELINE, nodes.WINDOW_RESOLVER: WINDOW, nodes.MODEL_RESOLVER: MODELS}
_STATE = metadata_store_pb2.Execution


class WaitTimeout(BadInput):
    """An earlier span's work did not finish in time; names the claims still open."""


@dataclasses.dataclass(frozen=True)
class Claim:
    execution_id: int
    pipeline: str
    span: int
    attempt: int
    owner: str
    kind: str
    phase: str
    gate: str
    active: bool
    updated_at: str

    @property
    def gate_pending(self) -> bool:
        """Its span's gate has not decided yet (and someone is still working on it)."""
        return self.active and self.phase == CLAIMED

    def describe(self) -> str:
        return f"span {self.span} ({self.kind} of run {self.owner}: {self.phase}, since {self.updated_at})"


def _type_id(store) -> int:
    return store.put_execution_type(metadata_store_pb2.ExecutionType(name=EXECUTION_TYPE))


def _from_execution(e) -> Claim:
    p = metadata_queries.props(e)
    return Claim(e.id, p["pipeline"], int(p["span"]), int(p["attempt"]), p["owner"], p["kind"], p["phase"],
                 p.get("gate", ""), e.last_known_state == _STATE.RUNNING, p.get("updated_at", ""))


def claims(store, pipeline: str) -> dict[int, Claim]:
    """The latest claim of every span of the pipeline."""
    try:
        executions = store.get_executions_by_type(EXECUTION_TYPE)
    except mlmd_errors.NotFoundError:
        return {}
    latest: dict[int, Claim] = {}
    for e in executions:
        c = _from_execution(e)
        if c.pipeline == pipeline and (c.span not in latest or c.attempt > latest[c.span].attempt):
            latest[c.span] = c
    return latest


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _write(store, execution_id: int | None, type_id: int, values: dict, state) -> int:
    e = metadata_store_pb2.Execution(type_id=type_id)
    if execution_id is None:
        e.name = f"{values['pipeline']}:{values['span']}:{values['attempt']}"
    else:
        e.id = execution_id
    e.last_known_state = state
    metadata_queries.set_props(e, values)
    [written] = store.put_executions([e])
    return written


def take(store, pipeline: str, span: int, owner: str, kind: str) -> Claim | None:
    """Claims a span for `owner`; None while another owner's claim on it is active.

    The owner's own active claim is returned as it is (a retried task continues it).
    """
    type_id = _type_id(store)
    for _ in range(20):
        current = claims(store, pipeline).get(span)
        if current is not None and current.active:
            return current if current.owner == owner else None
        attempt = current.attempt + 1 if current else 1
        values = {"pipeline": pipeline, "span": int(span), "attempt": attempt, "owner": owner, "kind": kind,
                  "phase": CLAIMED, "gate": "", "updated_at": _now()}
        try:
            _write(store, None, type_id, values, _STATE.RUNNING)
        except mlmd_errors.AlreadyExistsError:
            continue  # another run took this attempt first: read it again
        return claims(store, pipeline)[span]
    raise RuntimeError(f"could not claim span {span} of {pipeline}: too many concurrent attempts")


def take_waiting(store, pipeline: str, span: int, owner: str, kind: str, log: Callable[[str], None],
                 timeout_s: float, poll_s: float = 2.0) -> Claim:
    """`take`, waiting while another owner's claim on the span is open.

    Raises:
      WaitTimeout: the other claim stayed open longer than `timeout_s`, naming it.
    """
    start, said = time.monotonic(), False
    while (claim := take(store, pipeline, span, owner, kind)) is None:
        holder = claims(store, pipeline)[span]
        if time.monotonic() - start > timeout_s:
            raise WaitTimeout(f"span {span} is still held by {holder.describe()}")
        if not said:
            log(f"span {span} is held by {holder.describe()}; waiting for it")
            said = True
        time.sleep(poll_s)
    return claim


def update(store, claim: Claim, phase: str, gate: str | None = None) -> Claim:
    """Moves a claim on; `finished` ends it (COMPLETE, or FAILED when its gate never decided)."""
    values = {"pipeline": claim.pipeline, "span": claim.span, "attempt": claim.attempt, "owner": claim.owner,
              "kind": claim.kind, "phase": phase, "gate": gate if gate is not None else claim.gate,
              "updated_at": _now()}
    state = _STATE.RUNNING
    if phase == FINISHED:
        state = _STATE.COMPLETE if values["gate"] in (PASSED, STOPPED) else _STATE.FAILED
        values["gate"] = values["gate"] or FAILED
    _write(store, claim.execution_id, _type_id(store), values, state)
    return dataclasses.replace(claim, phase=phase, gate=values["gate"], active=state == _STATE.RUNNING,
                               updated_at=values["updated_at"])


def release(store, pipeline: str, span: int) -> Claim:
    """Closes a span's open claim whose run died without closing it (an operator's decision).

    Raises:
      LookupError: the span has no open claim.
    """
    claim = claims(store, pipeline).get(span)
    if claim is None or not claim.active:
        raise LookupError(f"span {span} of {pipeline} has no open claim")
    return update(store, claim, FINISHED)


def owned(store, pipeline: str, span: int, owner: str) -> Claim | None:
    c = claims(store, pipeline).get(span)
    return c if c is not None and c.owner == owner else None


def blockers(store, pipeline: str, span: int, window_spans: int, what: str, owner: str) -> list[Claim]:
    """The claims a node of `owner`'s run of `span` must wait for before it runs (none: go)."""
    latest = claims(store, pipeline)
    earlier = sorted((c for s, c in latest.items() if s < span and c.owner != owner), key=lambda c: -c.span)
    if what == BASELINE:  # the nearest earlier span that passed is the baseline: all above it must be decided
        for c in earlier:
            if c.gate_pending:
                return [c]
            if c.gate == PASSED:
                return []
        return []
    if what == WINDOW:
        first, _ = spans.window(span, window_spans)
        return [c for c in earlier if c.span >= first and c.gate_pending]
    if what == MODELS:
        return [c for c in earlier if c.kind == RUN and c.active]
    raise ValueError(f"unknown wait {what!r}; known: {BASELINE}, {WINDOW}, {MODELS}")


def wait(open_store: Callable[[], object], pipeline: str, span: int, window_spans: int, what: str, owner: str,
         log: Callable[[str], None], timeout_s: float, poll_s: float = 2.0) -> float:
    """Blocks until nothing blocks `what`; returns the seconds waited.

    Raises:
      WaitTimeout: still blocked after `timeout_s`, naming the claims.
    """
    start = time.monotonic()
    store = open_store()
    said = None
    while True:
        blocking = blockers(store, pipeline, span, window_spans, what, owner)
        if not blocking:
            return time.monotonic() - start
        text = "; ".join(c.describe() for c in blocking)
        if time.monotonic() - start >= timeout_s:
            raise WaitTimeout(f"span {span}: {what} still waits after {timeout_s:.0f} s for {text} (if that run is "
                              f"gone, close its claim: retrain metadata release --span SPAN)")
        if text != said:
            log(f"span {span}: {what} waits for {text}")
            said = text
        time.sleep(poll_s)
