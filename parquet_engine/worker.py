"""An ingestion worker: `python -m parquet_engine.worker`, one row-group task per line on
stdin (JSON), one result per line on stdout (fast_parquet.encode_chunk's, or an error)."""

from __future__ import annotations

import sys

from csv_engine import worker
from parquet_engine import fast_parquet


def main() -> int:
    return worker.serve(fast_parquet.encode_chunk)


if __name__ == "__main__":
    sys.exit(main())
