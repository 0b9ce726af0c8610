"""Which earlier spans a run ingests first (in-process: MLMD written by hand)."""

from __future__ import annotations

import os

import pytest

from core import layout, metadata
from core import nodes as N
from runner import runs
from tests.governance.fake_runs import FakeRun, open_store


@pytest.mark.parametrize(("available", "ingested", "span", "window", "expected"), [
    # A fresh store: the window's earlier months.
    ([201610, 201611, 201612], set(), 201612, 3, [201610, 201611]),
    # Already ingested ones are not ingested again.
    ([201610, 201611, 201612], {201610}, 201612, 3, [201611]),
    # A window of one still needs the previous span: the drift baseline.
    ([201610, 201611, 201612], set(), 201612, 1, [201611]),
    # A gap: the newest earlier span is the baseline even outside the window.
    ([201601, 201612], set(), 201612, 3, [201601]),
    # Spans after the run's span and spans outside the window stay out.
    ([201606, 201610, 201611, 201612, 201701], set(), 201612, 3, [201610, 201611]),
    # Nothing earlier at all.
    ([201612], set(), 201612, 6, []),
    # Across a year boundary.
    ([201611, 201612, 201701, 201702], set(), 201702, 3, [201612, 201701]),
])
def test_spans_to_backfill(available, ingested, span, window, expected):
    assert runs.spans_to_backfill(available, ingested, span, window) == expected


def test_ingested_spans_are_read_from_the_example_gen_in_mlmd(tmp_path):
    path = layout.metadata_path(str(tmp_path), "taxi")
    where = metadata.parse("sqlite", path)
    assert runs.ingested_spans(where, "taxi") == set()  # no store yet
    os.makedirs(os.path.dirname(path))
    store = open_store(path)
    for i, span in enumerate((201610, 201611)):
        run = FakeRun(store, str(tmp_path / "root"), run_id=f"r{i}")
        run.node(N.CSV_EXAMPLE_GEN, outputs={"examples": [run.artifact("Examples", "examples", {"span": span})]})
    other = FakeRun(store, str(tmp_path / "root"), pipeline="digits", run_id="d")
    other.node(N.CSV_EXAMPLE_GEN, outputs={"examples": [other.artifact("Examples", "examples", {"span": 201601})]})
    assert runs.ingested_spans(where, "taxi") == {201610, 201611}
    assert runs.ingested_spans(where, "taxi", N.IMPORT_EXAMPLE_GEN) == set()
