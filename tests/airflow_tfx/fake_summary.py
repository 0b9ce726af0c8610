"""A stand-in for `retrain summary --outcome-line`: the human summary, then the outcome line.

    fake_summary.py OUTCOME [stale|runtime|new_columns] [ignored retrain arguments...]
"""

import json
import sys

from core import outcome as outcomes

name = sys.argv[1]
reasons = {outcomes.NOT_BLESSED: "auc 0.61 below 0.70", outcomes.STOPPED_BY_DATA_GATE: "payment_type"}
print(f"Run r1 of pipeline taxi: {name.upper()}", flush=True)
print(json.dumps({"pipeline": "taxi", "run_id": "r1", "span": 201304, "outcome": name, "reason": reasons.get(name),
                  "report": None,
                  "stale": ["the served model is 9 spans old, older than max_age_spans 6"]
                  if sys.argv[2:3] == ["stale"] else None,
                  "runtime_changed": ["tensorflow 2.16.1 -> 2.16.2", "+ zstd 1.5"]
                  if sys.argv[2:3] == ["runtime"] else None,
                  "new_columns": ["surge_multiplier"] if sys.argv[2:3] == ["new_columns"] else None}), flush=True)
sys.exit(outcomes.exit_code(name))
