"""Exit codes of the `retrain` CLI, shared with the Airflow operators that read them.

Plain constants, importable from the Airflow environment (no TensorFlow, no TFX).
"""

OK = 0  # done: pushed, not blessed, cached or skipped
FAILED = 1  # a node failed
BAD_INPUT = 2  # bad input; nothing was written
GATE_STOPPED = 3  # the data gate refused the span
AWAITING_APPROVAL = 4  # the candidate waits for a reviewer (`retrain approve`), nothing pushed
NOT_YET = 75  # `retrain wait`: earlier spans' work is still open (EX_TEMPFAIL); ask again later
