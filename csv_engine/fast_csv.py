"""CSV files to TFRecord shards of tf.Examples on every core, in bounded memory.

The files are cut into chunks of whole records (`plan`); worker processes encode chunks
(`csv_encoding`) and write one gzipped TFRecord shard per chunk and output split, the way
Beam names its shards (`data_tfrecord-00003-of-00040.gz`). A column's type is the split's
(CsvExampleGen infers it over every row), so each chunk is first encoded with its own
types; the few chunks whose types differ from the split's merged types are encoded again.
Memory per worker is a chunk and one padded batch, whatever the size of the files.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import mmap
import os
import queue
import subprocess
import sys
import threading
import time

from core import csv_header
from csv_engine import csv_encoding

logger = logging.getLogger(__name__)

# A chunk is about this many bytes of CSV (~250k taxi rows): a worker holds one at a time.
CHUNK_BYTES = 32 << 20
# Below this much input, workers cost more to start than they save.
IN_PROCESS_BYTES = 16 << 20
SHARD_NAME = "data_tfrecord-{index:05d}-of-{total:05d}.gz"


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Whole records `[start, end)` of a file whose data begin at `data_start`."""

    path: str
    start: int
    end: int
    data_start: int


def plan(paths: list[str], chunk_bytes: int) -> tuple[list[str], list[Chunk]]:
    """The split's column names and its chunks, cut where a record ends.

    The names are the span CSV header rule's (core/csv_header.py), the Beam path's too. A
    record ends at a newline after which the file's data so far hold an even number of
    double quotes (CsvExampleGen joins lines until the quotes of a record balance).

    Raises:
      csv_encoding.CsvInputError: a header the rule refuses, or the files' headers differ.
    """
    names, starts = csv_header.split_columns(paths)
    chunks = []
    for path, data_start in zip(paths, starts):
        size = os.path.getsize(path)
        if size <= data_start:
            continue
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            quoted = data.find(b'"', data_start) >= 0
            start = data_start
            while start < size:
                end = _record_end(data, start, min(size, start + chunk_bytes), size, quoted)
                chunks.append(Chunk(path, start, end, data_start))
                start = end
    return names, chunks


def _record_end(data, start: int, target: int, size: int, quoted: bool) -> int:
    end = target if target >= size else data.find(b"\n", target) + 1 or size
    if quoted:
        quotes = data[start:end].count(b'"')
        while quotes % 2 and end < size:
            nxt = data.find(b"\n", end) + 1 or size
            quotes += data[end:nxt].count(b'"')
            end = nxt
    return end


def encode_chunk(task: dict) -> dict:
    """Encodes one chunk into its shard files (one per output split); what a worker runs.

    Args:
      task: path, start, end, data_start, names, buckets, outputs (one shard path per
        split), level (gzip level), and types (the split's, or None to use the chunk's own).

    Returns:
      {"types": the types it was encoded with, "rows": per split}.
    """
    with open(task["path"], "rb") as f:
        f.seek(task["start"])
        data = f.read(task["end"] - task["start"])
    names = task["names"]
    try:
        cells = csv_encoding.parse_chunk(data, len(names), task["path"], 0)
    except csv_encoding.CsvInputError:
        # Bad input (rare): parse again knowing the chunk's first line number, for the message.
        csv_encoding.parse_chunk(data, len(names), task["path"], _first_line(task))
        raise
    del data
    # Columns not ingested are parsed (to count cells) and never encoded.
    keep = [i for i, name in enumerate(names) if name not in task.get("drop", ())]
    columns = [csv_encoding.Column.of(cells[i]) for i in keep]
    names = [names[i] for i in keep]
    del cells
    types = task["types"] or [c.type() for c in columns]
    encoder = csv_encoding.Encoder(names, types, task["buckets"])
    rows = write_shards(encoder, columns, task["outputs"], task["level"])
    return {"types": types, "rows": rows}


def write_shards(encoder: csv_encoding.Encoder, columns: list[csv_encoding.Column], outputs: list[str],
                 level: int) -> list[int]:
    """Encodes the columns' rows into one gzipped TFRecord shard per output split (written
    whole or not at all); returns the rows written per split."""
    from isal import isal_zlib

    streams = [open(p + ".tmp", "wb") for p in outputs]
    compressors = [isal_zlib.compressobj(level, isal_zlib.DEFLATED, 31) for _ in outputs]
    rows = [0] * len(outputs)
    try:
        for batch in encoder.batches(columns):
            for split, (stream, compressor) in enumerate(zip(streams, compressors)):
                data = batch.split_bytes(split)
                rows[split] += int((batch.partitions == split).sum())
                stream.write(compressor.compress(data))
        for stream, compressor in zip(streams, compressors):
            stream.write(compressor.flush())
    except BaseException:
        for stream, path in zip(streams, outputs):
            stream.close()
            os.remove(path + ".tmp")
        raise
    finally:
        for stream in streams:
            stream.close()
    for path in outputs:
        os.replace(path + ".tmp", path)
    return rows


def _first_line(task: dict) -> int:
    """The file's line number of the chunk's first line (line 1 is the header)."""
    with open(task["path"], "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return 2 + data[task["data_start"]:task["start"]].count(b"\n")


class WorkerError(RuntimeError):
    """A worker process died or answered something else than a result."""


class _Worker:
    """One worker process (`python -m csv_engine.worker`, or another engine's `module`): tasks
    in, results out (JSON lines); an answer flagged `input_error` raises `input_error`."""

    def __init__(self, module: str = "csv_engine.worker", input_error: type = csv_encoding.CsvInputError):
        self.input_error = input_error
        self.proc = subprocess.Popen([sys.executable, "-m", module],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def run(self, task: dict) -> dict:
        self.proc.stdin.write(json.dumps(task) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise WorkerError(f"ingestion worker {self.proc.pid} exited ({self.proc.wait()}) on {task['path']}")
        answer = json.loads(line)
        if "error" in answer:
            cls = self.input_error if answer.get("input_error") else WorkerError
            raise cls(answer["error"])
        return answer

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_tasks(tasks: list[dict], workers: int, on_done=lambda i, result: None, encode=encode_chunk,
              module: str = "csv_engine.worker", input_error: type = csv_encoding.CsvInputError) -> list[dict]:
    """Runs the tasks on `workers` processes (in this process when workers is 0): `encode` in
    this process, `python -m module` in workers (the CSV engine's unless another engine's).

    Raises:
      input_error: a chunk is bad input (the first one found; csv_encoding.CsvInputError).
      WorkerError: a worker died.
    """
    results: list[dict | None] = [None] * len(tasks)
    if workers == 0:
        for i, task in enumerate(tasks):
            results[i] = encode(task)
            on_done(i, results[i])
        return results
    todo: queue.Queue = queue.Queue()
    for i in range(len(tasks)):
        todo.put(i)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def serve():
        worker = _Worker(module, input_error)
        try:
            while not errors:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                results[i] = worker.run(tasks[i])
                with lock:
                    on_done(i, results[i])
        except BaseException as e:  # handed to the caller below
            errors.append(e)
        finally:
            worker.close()

    threads = [threading.Thread(target=serve, daemon=True) for _ in range(min(workers, len(tasks)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def ingest(paths: list[str], split_dirs: list[str], buckets: list[int], workers: int, level: int = 1,
           chunk_bytes: int | None = None, drop: tuple[str, ...] | list[str] = ()) -> dict:
    """Writes the examples of the CSV files into the split folders; returns what was done.

    Args:
      paths: the split's CSV files.
      split_dirs: one output folder per output split, in the split config's order.
      buckets: cumulative hash buckets of the splits.
      workers: worker processes (0: this process).
      level: gzip level of the shards.
      drop: columns left out of the examples (the feature policy's `ingest: drop`): their
        cells are parsed and never encoded, so their values reach no file.

    Returns:
      {"rows": per split, "chunks", "rechecked" (chunks encoded twice), "types" (of the
      columns written), "dropped" (the columns of `drop` the files have), "seconds"}.

    Raises:
      csv_encoding.CsvInputError: bad input, naming the file and line.
    """
    started = time.monotonic()
    names, chunks = plan(paths, chunk_bytes or CHUNK_BYTES)
    total_bytes = sum(c.end - c.start for c in chunks)
    if total_bytes < IN_PROCESS_BYTES:
        workers = 0
    for d in split_dirs:
        os.makedirs(d, exist_ok=True)
    n = max(1, len(chunks))
    dropped = [name for name in names if name in set(drop)]
    kept = [name for name in names if name not in set(drop)]

    def task(i: int, types):
        chunk = chunks[i]
        return {"path": chunk.path, "start": chunk.start, "end": chunk.end, "data_start": chunk.data_start,
                "names": names, "drop": dropped, "buckets": buckets, "types": types, "level": level,
                "outputs": [os.path.join(d, SHARD_NAME.format(index=i, total=n)) for d in split_dirs]}

    done = {"rows": 0, "bytes": 0}

    def progress(i: int, result: dict):
        done["rows"] += sum(result["rows"])
        done["bytes"] += chunks[i].end - chunks[i].start
        seconds = time.monotonic() - started
        logger.info("ingested %d/%d MB, %d rows (%.0f rows/s)", done["bytes"] >> 20, total_bytes >> 20,
                    done["rows"], done["rows"] / max(seconds, 1e-6))

    results = run_tasks([task(i, None) for i in range(len(chunks))], workers, progress)
    types = csv_encoding.merge_types([r["types"] for r in results]) if results else [csv_encoding.UNKNOWN] * len(kept)
    again = [i for i, r in enumerate(results) if r["types"] != types]
    if again:
        logger.info("%d chunk(s) saw other column types than the split's %s: encoding them again", len(again),
                    [csv_encoding.TYPE_NAMES[t] for t in types])
        for i, result in zip(again, run_tasks([task(i, types) for i in again], workers)):
            results[i] = result
    if not chunks:  # no data rows: one empty shard per split, as Beam writes
        for d in split_dirs:
            encode_chunk_empty(os.path.join(d, SHARD_NAME.format(index=0, total=1)), level)
    rows = [sum(r["rows"][s] for r in results) for s in range(len(split_dirs))]
    return {"rows": rows, "chunks": len(chunks), "rechecked": len(again), "workers": workers,
            "types": dict(zip(kept, (csv_encoding.TYPE_NAMES[t] for t in types))), "dropped": dropped,
            "seconds": round(time.monotonic() - started, 2)}


def encode_chunk_empty(path: str, level: int) -> None:
    from isal import isal_zlib

    compressor = isal_zlib.compressobj(level, isal_zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        f.write(compressor.flush())
