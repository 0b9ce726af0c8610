"""runner/beam_fixes.py: Beam's state cache weighs values as before, without rebuilding the
module exclusion set per call; dill's trace switch sets the logger level only on a change."""

import logging

from runner import beam_fixes


def test_state_cache_sizes_are_unchanged_and_the_exclusion_set_is_built_once(monkeypatch):
    from apache_beam.runners.worker import statecache
    from objsize import traverse

    values = [{"a": list(range(500)), "b": "x" * 100}, ("tuple", 3.5, b"bytes" * 10), {"nested": [[1, 2], {"k": None}]}]
    before = [statecache.get_deep_size(v) for v in values]
    calls = []
    monkeypatch.setattr(traverse, "_iter_modules_globals", lambda: calls.append(1) or iter(()))
    beam_fixes.apply()
    assert [statecache.get_deep_size(v) for v in values] == before
    assert calls == []  # objsize's per-call walk over every module is gone


def test_dills_trace_switch_sets_the_level_only_when_it_changes(monkeypatch):
    from dill import _dill

    beam_fixes.apply()
    cleared = []
    monkeypatch.setattr(logging.Logger.manager, "_clear_cache", lambda: cleared.append(1))
    _dill._trace(False)
    _dill._trace(False)
    assert cleared == [] and _dill.log.level == logging.WARN
    _dill._trace(True)
    assert _dill.log.level == logging.INFO and cleared == [1]
    _dill._trace(False)
    assert _dill.log.level == logging.WARN


def test_the_direct_runner_never_downloads_prism_and_runs_on_its_python_runner(caplog):
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    beam_fixes.apply()
    with caplog.at_level(logging.INFO, logger="apache_beam"):
        with beam.Pipeline() as p:  # the DirectRunner, as a node with the `direct` profile runs it
            assert_that(p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 2), equal_to([2, 4, 6]))
    text = caplog.text
    assert "Downloading prism" not in text and beam_fixes.PRISM_REFUSED in text
    assert "Falling back to DirectRunner" in text
