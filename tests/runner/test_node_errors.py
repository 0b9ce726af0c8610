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
