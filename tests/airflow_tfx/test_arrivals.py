"""Span arrival: what counts as arrived, what gets announced, which span a run ingests, and the
deferred wait's trigger firing on arrival or at its deadline."""

import asyncio
import datetime as dt
import os
import time
import types

import pendulum

from airflow_tfx import arrivals


def _span(root, span, files=("a.csv",), age_s=3600.0, marker=False):
    folder = root / f"span-{span}"
    folder.mkdir(parents=True, exist_ok=True)
    for name in files:
        path = folder / name
        path.write_text("x,y\n1,2\n")
        os.utime(path, (time.time() - age_s, time.time() - age_s))
    if marker:
        (folder / arrivals.SUCCESS_MARKER).write_text("")
    return folder


def test_a_span_arrives_when_its_files_stop_changing_or_carry_a_success_marker(tmp_path):
    _span(tmp_path, 201301)
    _span(tmp_path, 201302, age_s=5)                 # still being copied
    _span(tmp_path, 201303, age_s=5, marker=True)    # the producer says it is complete
    _span(tmp_path, 201304, files=("notes.txt",))   # no data file of the format
    arrived, settling = arrivals.scan(str(tmp_path), "csv", settle_seconds=60)
    assert [s.span for s in arrived] == [201301, 201303]
    assert [s.span for s in settling] == [201302]
    assert arrived[0].files == 1 and arrived[0].bytes == 8
    # The same folder read as TFRecords holds nothing.
    assert arrivals.scan(str(tmp_path), "tfrecord", settle_seconds=60) == ([], [])


def test_only_spans_after_the_last_announced_one_are_announced():
    assert arrivals.to_announce([201301, 201302, 201303], []) == [201303]  # a new deployment: the newest only
    assert arrivals.to_announce([201301, 201302, 201303], ["201301"]) == [201302, 201303]
    assert arrivals.to_announce([201301, 201302, 201303], ["201303", "201302"]) == []
    assert arrivals.to_announce([], []) == []
    # Keys as an external producer may write them: YYYY-MM counts, a key that is no month does not.
    assert arrivals.to_announce([201301, 201302, 201303], ["2013-02", None, "latest"]) == [201303]


def test_the_run_span_rule():
    run = types.SimpleNamespace(partition_key=None, run_after=None)
    start, end = pendulum.datetime(2016, 12, 1), pendulum.datetime(2017, 1, 1)
    assert arrivals.run_span({"span": "201305"}, run, start, end, end) == "201305"
    assert arrivals.run_span({"span": None}, types.SimpleNamespace(partition_key="201402"), start, end, end) == "201402"
    assert arrivals.run_span({}, run, start, end, end) == "201612"  # the calendar's data interval
    # No interval (a manual run under the data schedule): the month before the run's date.
    assert arrivals.run_span({}, run, end, end, end) == "201612"
    assert arrivals.run_span({}, types.SimpleNamespace(partition_key=None, run_after=start), None, None, None) == "201611"


def _fire(trigger):
    async def first():
        async for event in trigger.run():
            return event.payload
    return asyncio.run(asyncio.wait_for(first(), timeout=20))


def test_the_wait_fires_when_the_span_lands(tmp_path):
    deadline = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=5)).isoformat()
    trigger = arrivals.SpanArrivalTrigger(str(tmp_path), 201305, "csv", 0, deadline, poll_seconds=0.2)
    # The trigger survives its own serialization (the triggerer rebuilds it from this).
    path, kwargs = trigger.serialize()
    assert path == "airflow_tfx.arrivals.SpanArrivalTrigger"
    trigger = arrivals.SpanArrivalTrigger(**kwargs)

    async def land_then_fire():
        async def land():
            await asyncio.sleep(0.5)
            _span(tmp_path, 201305, marker=True)
        asyncio.get_running_loop().create_task(land())
        async for event in trigger.run():
            return event.payload
    payload = asyncio.run(asyncio.wait_for(land_then_fire(), timeout=20))
    assert payload["status"] == "arrived" and payload["span"] == 201305 and payload["files"] == 1


def test_the_wait_ends_at_its_deadline_without_the_span(tmp_path):
    deadline = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)).isoformat()
    payload = _fire(arrivals.SpanArrivalTrigger(str(tmp_path), 201305, "csv", 0, deadline, poll_seconds=0.2))
    assert payload == {"status": "timeout", "span": 201305}


def test_a_span_still_settling_is_not_an_arrival(tmp_path):
    _span(tmp_path, 201305, age_s=0)
    deadline = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)).isoformat()
    payload = _fire(arrivals.SpanArrivalTrigger(str(tmp_path), 201305, "csv", 3600, deadline, poll_seconds=0.2))
    assert payload["status"] == "timeout"


def test_the_asset_names_the_pipeline_and_its_folder(tmp_path):
    asset = arrivals.spans_asset("taxi", str(tmp_path))
    assert asset.name == "taxi_spans" and asset.uri == f"file://{tmp_path}"
