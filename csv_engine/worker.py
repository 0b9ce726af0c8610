"""An ingestion worker: `python -m csv_engine.worker`, one chunk task per line
on stdin (JSON), one result per line on stdout (fast_csv.encode_chunk's, or an error).
`serve` is the loop every engine's worker runs (parquet_engine.worker too)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from core.errors import BadInput


def serve(encode: Callable[[dict], dict]) -> int:
    """Answers each task line on stdin with `encode`'s result, or the error: bad input
    (CsvInputError, ParquetInputError: BadInput) marked as such for the executor."""
    for line in sys.stdin:
        try:
            answer = encode(json.loads(line))
        except BadInput as e:
            answer = {"error": str(e), "input_error": True}
        except Exception as e:  # reported to the executor, which fails the node with it
            answer = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


def main() -> int:
    from csv_engine import fast_csv

    return serve(fast_csv.encode_chunk)


if __name__ == "__main__":
    sys.exit(main())
