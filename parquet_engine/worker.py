"""An ingestion worker: `python -m parquet_engine.worker`, one row-group task per line on
stdin (JSON), one result per line on stdout (fast_parquet.encode_chunk's, or an error)."""

from __future__ import annotations

import json
import sys

from core.errors import BadInput
from parquet_engine import fast_parquet


def main() -> int:
    for line in sys.stdin:
        try:
            answer = fast_parquet.encode_chunk(json.loads(line))
        except BadInput as e:
            answer = {"error": str(e), "input_error": True}
        except Exception as e:  # reported to the executor, which fails the node with it
            answer = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
