"""Server-side batching: concurrent requests to one signature become one model call.

A request waits at most `max_wait_ms` for others to join; a batch holds at most
`max_batch_size` rows; `num_batch_threads` batches run at once (TF Serving's
BatchingParameters field: "must be >= 1, and should be tuned carefully"; its batching
README starts from one per core on a server with cores of its own. Default 1: measured
with benchmarks/serving on 2 cores shared with the clients, 2 threads lost 15-40%). Requests whose inputs cannot be concatenated (different trailing
shapes) or whose outputs do not split by rows run on their own, so batching never changes
an answer. A request its client gave up on while it waited (a cancelled Future: a gRPC
deadline or disconnect) is dropped from its batch and never reaches the model.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future

import numpy as np

logger = logging.getLogger(__name__)

Inputs = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]


def derived(source: Future, fn: Callable[[Outputs], Outputs]) -> Future:
    """A Future of fn(source's result) that keeps the batcher's cancellation contract both
    ways: cancelling it cancels `source` (a request still queued is dropped from its batch),
    and an answer that arrives after it was cancelled is discarded, not set."""
    out: Future = Future()
    out.add_done_callback(lambda done: source.cancel() if done.cancelled() else None)

    def finish(done: Future) -> None:
        if done.cancelled():
            out.cancel()
        elif out.set_running_or_notify_cancel():  # RUNNING: cannot be cancelled any more
            if done.exception() is not None:
                out.set_exception(done.exception())
                return
            try:
                value = fn(done.result())
            except Exception as e:  # noqa: BLE001  the waiter gets it; a callback's error would be lost
                out.set_exception(e)
            else:
                out.set_result(value)

    source.add_done_callback(finish)
    return out


@dataclasses.dataclass(frozen=True)
class BatchOptions:
    max_batch_size: int = 64
    max_wait_ms: float = 2.0
    enabled: bool = True
    num_batch_threads: int = 1

    def __post_init__(self):
        if self.num_batch_threads < 1:
            raise ValueError(f"num_batch_threads must be positive; was {self.num_batch_threads}")


@dataclasses.dataclass
class _Item:
    inputs: Inputs
    rows: int
    future: Future


def _rows(inputs: Inputs) -> int | None:
    """The shared 0-th dimension of all inputs, or None (scalars, or different sizes)."""
    sizes = {a.shape[0] if a.ndim else None for a in inputs.values()}
    return sizes.pop() if len(sizes) == 1 and None not in sizes else None


def _key(inputs: Inputs) -> tuple:
    return tuple(sorted((n, a.dtype.str, a.shape[1:]) for n, a in inputs.items()))


class Batcher:
    """Runs `fn(inputs) -> outputs` on batches of concurrent requests (`num_batch_threads`
    threads, each forming and running its own batch from one queue)."""

    def __init__(self, fn: Callable[[Inputs], Outputs], options: BatchOptions, on_batch=lambda rows: None):
        self._fn, self._options, self._on_batch = fn, options, on_batch
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        # Requests submitted and not yet answered, and those of them in a batch that is
        # running: a request that nobody else could join does not wait for company.
        self._in_flight = 0
        self._running = 0
        self._count_lock = threading.Lock()
        self._threads = [threading.Thread(target=self._loop, name=f"batcher-{i}", daemon=True)
                         for i in range(options.num_batch_threads if options.enabled else 0)]
        for t in self._threads:
            t.start()

    def __call__(self, inputs: Inputs) -> Outputs:
        return self.submit(inputs).result()

    def submit(self, inputs: Inputs, executor: Executor | None = None) -> Future:
        """The outputs, as a Future (a caller can wait for it without holding a thread); a
        request that cannot be batched runs on `executor`, or without one now, in the
        caller's thread."""
        rows = _rows(inputs)
        if not self._options.enabled or rows is None or rows >= self._options.max_batch_size:
            if executor is not None:
                return executor.submit(self._run_now, inputs, rows)
            future: Future = Future()
            try:
                future.set_result(self._run_now(inputs, rows))
            except Exception as e:  # noqa: BLE001  handed to the caller
                future.set_exception(e)
            return future
        item = _Item(inputs, rows, Future())
        with self._count_lock:
            self._in_flight += 1
        item.future.add_done_callback(self._answered)
        self._queue.put(item)
        return item.future

    def _run_now(self, inputs: Inputs, rows: int | None) -> Outputs:
        self._on_batch(rows or 1)
        return self._fn(inputs)

    def _answered(self, _future: Future) -> None:
        with self._count_lock:
            self._in_flight -= 1

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, rows = [first], first.rows
            deadline = time.perf_counter() + self._options.max_wait_ms / 1000.0
            closing = False
            while rows < self._options.max_batch_size:
                if self._in_flight - self._running <= len(batch) and self._queue.empty():
                    break  # nobody else is waiting: run now rather than wait for company
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                try:
                    item = self._queue.get(timeout=remaining)
                except queue.Empty:
                    break
                if item is None:
                    closing = True
                    break
                batch.append(item)
                rows += item.rows
            with self._count_lock:
                self._running += len(batch)
            try:
                # RUNNING futures can no longer be cancelled, so every answer below lands.
                self._run([item for item in batch if item.future.set_running_or_notify_cancel()])
            except Exception:  # noqa: BLE001  a bug here must not stop the thread serving the queue
                logger.exception("batch of %d requests failed", len(batch))
                for item in batch:
                    if item.future.running():
                        item.future.set_exception(RuntimeError("the batch this request was in failed; see the server log"))
            finally:
                with self._count_lock:
                    self._running -= len(batch)
            if closing:
                return

    def _run(self, batch: list[_Item]) -> None:
        if not batch:
            return
        groups: dict[tuple, list[_Item]] = {}
        for item in batch:
            groups.setdefault(_key(item.inputs), []).append(item)
        for items in groups.values():
            if len(items) == 1:
                self._run_alone(items[0])
                continue
            merged = {n: np.concatenate([i.inputs[n] for i in items]) for n in items[0].inputs}
            total = sum(i.rows for i in items)
            try:
                self._on_batch(total)
                outputs = self._fn(merged)
            except Exception:  # noqa: BLE001  one bad request must not fail its neighbours
                for item in items:
                    self._run_alone(item)
                continue
            if any(o.ndim == 0 or o.shape[0] != total for o in outputs.values()):
                for item in items:
                    self._run_alone(item)
                continue
            start = 0
            for item in items:
                item.future.set_result({n: o[start : start + item.rows] for n, o in outputs.items()})
                start += item.rows

    def _run_alone(self, item: _Item) -> None:
        try:
            self._on_batch(item.rows)
            item.future.set_result(self._fn(item.inputs))
        except Exception as e:  # noqa: BLE001  handed to the waiting request
            item.future.set_exception(e)
