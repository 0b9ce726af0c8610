"""Data-aware scheduling: a span's arrival as an Airflow asset event, and the deferred wait for one.

Each pipeline has one asset, `<pipeline>_spans` (its data folder), partitioned by span:
an asset event with partition key `201612` says "span 201612 has arrived". Airflow's
Assets view lists them.

- `schedule: data` (default): the `<pipeline>_span_arrivals` DAG looks for new spans on a
  cron and emits one partitioned event per new span; the retraining DAG is scheduled on
  the asset (`PartitionedAssetTimetable`), so each arrived span gets its own run and a
  month without data gets none. An external system can announce a span itself through
  Airflow's REST API (`POST /api/v2/assets/events` with `partition_key`).
- `schedule: monthly`: the calendar creates the runs, and each run's `wait_for_span`
  task waits for its month deferred (in the triggerer, no worker slot) until
  `span_wait_hours` after the month ended; then the run is skipped, not failed.

A span has arrived when its folder holds data files and none of them changed for
`settle_seconds` (a producer still copying files is not picked up half-way), or at once
when it holds a `_SUCCESS` marker (Hadoop/Spark's convention for "complete").
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import os
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from airflow.sdk import Asset, BaseOperator
from airflow.sdk.exceptions import AirflowSkipException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from core import spans

SUCCESS_MARKER = "_SUCCESS"


@dataclasses.dataclass(frozen=True)
class SpanFiles:
    """What a span folder holds now."""

    span: int
    files: int
    bytes: int
    newest_mtime: float
    marker: bool

    def settled(self, now: float, settle_seconds: float) -> bool:
        return self.files > 0 and (self.marker or now - self.newest_mtime >= settle_seconds)

    def describe(self) -> dict[str, Any]:
        return {"files": self.files, "bytes": self.bytes,
                "newest_file": dt.datetime.fromtimestamp(self.newest_mtime, dt.timezone.utc).isoformat(),
                "success_marker": self.marker}


def span_files(data_root: str, span: int, example_format: str) -> SpanFiles | None:
    """The span folder's data files, or None when there is no such folder."""
    folder = spans.span_dir(data_root, span)
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return None
    suffix = spans.FILE_SUFFIXES[example_format]
    stats = [os.stat(os.path.join(folder, n)) for n in names if n.endswith(suffix)]
    return SpanFiles(span, len(stats), sum(s.st_size for s in stats),
                     max((s.st_mtime for s in stats), default=0.0), SUCCESS_MARKER in names)


def scan(data_root: str, example_format: str, settle_seconds: float,
         now: float | None = None) -> tuple[list[SpanFiles], list[SpanFiles]]:
    """(arrived, still settling) spans under `data_root`, oldest first.

    Raises:
      spans.SpanError: the data folder does not exist or holds no span folder.
    """
    now = time.time() if now is None else now
    arrived, settling = [], []
    for span in spans.list_spans(data_root):
        found = span_files(data_root, span, example_format)
        if found is None or found.files == 0:
            continue
        (arrived if found.settled(now, settle_seconds) else settling).append(found)
    return arrived, settling


def announced_spans(keys: Iterable[str | None]) -> list[int]:
    """The spans a list of partition keys names (YYYYMM or YYYY-MM, as `parse_span` reads
    them; an external producer may write either). Keys that are no month are ignored."""
    out = []
    for key in filter(None, keys):
        try:
            out.append(spans.parse_span(key))
        except spans.SpanError:
            continue
    return out


def to_announce(arrived: list[int], announced: Iterable[str | None]) -> list[int]:
    """The arrived spans to announce: those after the newest one already announced.

    With none announced yet (a new deployment), only the newest span: like `catchup=False`,
    enabling the DAG trains on the latest month, not on every month of the archive (replay
    older spans by announcing them through the REST API or triggering runs with `span`).
    """
    known = announced_spans(announced)
    if not known:
        return arrived[-1:]
    return [s for s in arrived if s > max(known)]


def run_span(params: Any, dag_run: Any, interval_start: Any, interval_end: Any, logical_date: Any) -> str:
    """The span a DAG run ingests (YYYYMM), one rule for every task of the run and its alerts:
    the `span` param; else the announced span (the run's partition key); else the month of
    the calendar's data interval; else (a run without an interval: manual or `dags test`
    under the data schedule) the month before the run's date, as the calendar would.
    """
    if params and params.get("span"):
        return str(params["span"])
    key = getattr(dag_run, "partition_key", None)
    if key:
        return str(key)
    if interval_start is not None and interval_end is not None and interval_start < interval_end:
        return interval_start.strftime("%Y%m")
    when = logical_date or getattr(dag_run, "run_after", None)
    return str(spans.shift_span(int(when.strftime("%Y%m")), -1)) if when is not None else ""


def spans_asset(pipeline: str, data_root: str) -> Asset:
    """The pipeline's span asset; events carry the span as their partition key."""
    return Asset(name=f"{pipeline}_spans", uri=f"file://{os.path.abspath(data_root)}", group="retrain_spans",
                 extra={"pipeline": pipeline})


class SpanArrivalOperator(BaseOperator):
    """Announces spans that arrived since the last announcement, one partitioned asset event
    each. Skipped when nothing new arrived (so no event, no run)."""

    ui_color = "#e6f2e6"

    def __init__(self, *, asset: Asset, data_root: str, example_format: str, settle_seconds: float,
                 **kwargs):
        super().__init__(inlets=[asset], outlets=[asset], **kwargs)
        self.asset = asset
        self.data_root = data_root
        self.example_format = example_format
        self.settle_seconds = settle_seconds

    def execute(self, context: Any) -> list[int]:
        try:
            arrived, settling = scan(self.data_root, self.example_format, self.settle_seconds)
        except spans.SpanError as e:
            raise AirflowSkipException(f"no span to announce: {e}") from e
        # The newest events are enough: announcements only move forward.
        recent = context["inlet_events"][self.asset].ascending(False).limit(200)
        announced = [e.partition_key for e in recent]
        new = to_announce([s.span for s in arrived], announced)
        for s in settling:
            self.log.info("span %d is still being written (newest file %s, settles after %ss without changes "
                          "or with a %s marker)", s.span, s.describe()["newest_file"], self.settle_seconds,
                          SUCCESS_MARKER)
        last = max(announced_spans(announced), default=None)
        if not new:
            raise AirflowSkipException(
                f"no new span under {self.data_root}: newest arrived "
                f"{arrived[-1].span if arrived else 'none'}, last announced {last or 'none'}")
        by_span = {s.span: s for s in arrived}
        events = context["outlet_events"][self.asset]
        events.add_partitions([str(s) for s in new])
        events.extra = {"data_root": self.data_root, "spans": {str(s): by_span[s].describe() for s in new}}
        for s in new:
            self.log.info("span %d arrived: %s", s, by_span[s].describe())
        self.log.info("announced %d span(s) on asset %s: %s", len(new), self.asset.name, new)
        return new


class SpanArrivalTrigger(BaseTrigger):
    """Fires once the span has arrived, or once `deadline` passed without it (in the triggerer)."""

    def __init__(self, data_root: str, span: int, example_format: str, settle_seconds: float,
                 deadline: str, poll_seconds: float = 60.0):
        super().__init__()
        self.data_root, self.span, self.example_format = data_root, span, example_format
        self.settle_seconds, self.deadline, self.poll_seconds = settle_seconds, deadline, poll_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.SpanArrivalTrigger",
                {"data_root": self.data_root, "span": self.span, "example_format": self.example_format,
                 "settle_seconds": self.settle_seconds, "deadline": self.deadline,
                 "poll_seconds": self.poll_seconds})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        deadline = dt.datetime.fromisoformat(self.deadline)
        while True:
            found = await asyncio.to_thread(span_files, self.data_root, self.span, self.example_format)
            if found is not None and found.settled(time.time(), self.settle_seconds):
                yield TriggerEvent({"status": "arrived", "span": self.span, **found.describe()})
                return
            if dt.datetime.now(dt.timezone.utc) >= deadline:
                yield TriggerEvent({"status": "timeout", "span": self.span})
                return
            await asyncio.sleep(self.poll_seconds)


class SpanWaitOperator(BaseOperator):
    """`wait_for_span` of the monthly schedule: waits deferred for the run's span; skips the
    run when it has not arrived `wait_hours` after the month ended. Records the arrival as a
    partitioned event of the span asset."""

    template_fields = ("span",)
    ui_color = "#eeeeee"

    def __init__(self, *, asset: Asset, span: str, data_root: str, example_format: str,
                 settle_seconds: float, wait_hours: float, poll_seconds: float = 60.0, **kwargs):
        super().__init__(outlets=[asset], **kwargs)
        self.asset, self.span, self.data_root = asset, span, data_root
        self.example_format, self.settle_seconds = example_format, settle_seconds
        self.wait_hours, self.poll_seconds = wait_hours, poll_seconds

    def _deadline(self, context: Any) -> dt.datetime:
        end = context.get("data_interval_end") or context["dag_run"].run_after
        return end + dt.timedelta(hours=self.wait_hours)

    def execute(self, context: Any) -> None:
        span = spans.parse_span(self.span)
        found = span_files(self.data_root, span, self.example_format)
        if found is not None and found.settled(time.time(), self.settle_seconds):
            return self._arrived(context, {"status": "arrived", "span": span, **found.describe()})
        deadline = self._deadline(context)
        if dt.datetime.now(dt.timezone.utc) >= deadline:
            return self._missing(span, deadline)
        self.log.info("span %d is not under %s yet; waiting (deferred, no worker slot) until %s",
                      span, self.data_root, deadline.isoformat())
        self.defer(trigger=SpanArrivalTrigger(self.data_root, span, self.example_format, self.settle_seconds,
                                              deadline.isoformat(), self.poll_seconds),
                   method_name="execute_complete")

    def execute_complete(self, context: Any, event: dict) -> None:
        if event.get("status") == "arrived":
            return self._arrived(context, event)
        return self._missing(int(event["span"]), self._deadline(context))

    def _arrived(self, context: Any, event: dict) -> None:
        self.log.info("span %s arrived: %s", event["span"], event)
        outlet = context["outlet_events"][self.asset]
        outlet.add_partitions(str(event["span"]))
        outlet.extra = {"data_root": self.data_root, "spans": {str(event["span"]): event}}

    def _missing(self, span: int, deadline: dt.datetime) -> None:
        raise AirflowSkipException(
            f"span {span} has not arrived under {self.data_root} by {deadline.isoformat()} "
            f"({self.wait_hours:g} h after its month ended): this run is skipped, nothing was trained. "
            f"When the data lands, trigger the DAG with span={span}.")
