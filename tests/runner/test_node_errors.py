"""A failed node's error names its root cause, not only the wrapper Beam and TFX add."""

from runner.node_runner import describe_error, failed_result


def _wrapped():
    try:
        try:
            raise ValueError("Columns do not match specified csv headers: 15 vs 18")
        except ValueError as inner:
            raise RuntimeError("[while running 'InputToRecord/ParseCSVLine']") from inner
    except RuntimeError as outer:
        return outer


def test_root_cause_is_in_the_message():
    message = describe_error(_wrapped())
    assert message.startswith("RuntimeError: [while running")
    assert "caused by ValueError: Columns do not match specified csv headers: 15 vs 18" in message


def test_plain_errors_read_as_before_and_long_ones_are_cut():
    assert describe_error(KeyError("x")) == "KeyError: 'x'"
    assert len(describe_error(ValueError("y" * 5000))) == 1500
    result = failed_result("CsvExampleGen", _wrapped(), 1.0)
    assert result.status == "failed" and not result.gate_stopped and "Columns do not match" in result.error


def test_a_serving_skew_block_is_a_stop_not_a_crash():
    from components.data_gate.component import DataGateError
    from components.serving_skew.executor import ServingSkewError

    skew = failed_result("ServingSkew", ServingSkewError("serving skew: trip_miles"), 1.0)
    gate = failed_result("DataGate", DataGateError("span 201701 stopped: payment_type", "/tmp/report.json", ["payment_type"]), 1.0)
    crash = failed_result("ServingSkew", OSError("disk full"), 1.0)
    assert skew.gate_stopped and gate.gate_stopped and not crash.gate_stopped  # exit 3, no retry: only verdicts
