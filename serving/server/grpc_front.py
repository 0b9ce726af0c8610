"""A gRPC front-end process: TF Serving's gRPC methods on grpc.aio (on uvloop), each call
handed as bytes to the model process over a Unix socket (`frames.py`) and its answer, or
its status code and details, handed back to the client.

Why a process of its own: Python's gRPC runtime costs ~0.2 ms of interpreter time per call
(an empty grpc.aio echo server peaks at ~5,000 calls/s here). In the model process that
time held the GIL that the handlers, the batcher and REST need, and gRPC reached ~0.6x of
the in-process ceiling where REST reached 0.8x. Here it has an interpreter of its own, so
gRPC's cost and the model's run on different cores (benchmarks/serving measures both).

The model process starts it (`grpc_service.GrpcServer`) and it never parses a message, so
it imports neither TensorFlow nor the TF Serving protos and starts in a fraction of a second.
It stops when the model process says so (the calls in flight get a grace period) or goes
away (its socket closes). SIGINT and SIGTERM are the model process's to handle: it stops
its front ends itself, so a signal to the whole process group cannot outrun it.

  python -m serving.server.grpc_front --core SOCKET --host HOST --port PORT [--reuse-port]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

import grpc
import uvloop

from core import logs
from serving.server import frames

logger = logging.getLogger("serving.server.grpc_front")


class _Core(asyncio.Protocol):
    """The connection to the model process: calls out, answers in, by call id."""

    def __init__(self, lost: asyncio.Future, stop: asyncio.Future):
        self._frames = frames.Reader()
        self._waiting: dict[int, asyncio.Future] = {}
        self._next_id = 0
        self._lost, self._stop = lost, stop
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        for kind, call_id, payload in self._frames.feed(data):
            if kind == frames.STOP:
                if not self._stop.done():
                    self._stop.set_result(float(payload))
                continue
            waiter = self._waiting.pop(call_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result((kind, payload))

    def connection_lost(self, exc) -> None:
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(ConnectionError("the model server went away"))
        self._waiting.clear()
        if not self._lost.done():
            self._lost.set_result(exc)

    async def call(self, method: int, request: bytes, context) -> bytes:
        self._next_id = self._next_id % 0xFFFFFFFF + 1  # 0 is the process's own (HELLO, errors)
        call_id = self._next_id
        waiter = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = waiter
        key = _request_id(context)
        if key is None:
            self.transport.writelines((frames.HEADER.pack(len(request) + 1, call_id, frames.CALL), bytes((method,)),
                                       request))
        else:
            self.transport.writelines((frames.HEADER.pack(len(request) + 3 + len(key), call_id, frames.KEYED),
                                       bytes((method,)), frames.KEY_LENGTH.pack(len(key)), key, request))
        try:
            kind, payload = await waiter
        except asyncio.CancelledError:  # the client's deadline passed, or it cancelled or went away
            if self._waiting.pop(call_id, None) is not None and not self.transport.is_closing():
                self.transport.write(frames.pack(frames.CANCEL, call_id))
            raise
        except ConnectionError as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            # gRPC has told the client DEADLINE_EXCEEDED already; an answer now fails to send.
            raise asyncio.CancelledError
        if kind == frames.REPLY:
            return payload
        code, details = frames.parse_error(payload)
        await context.abort(grpc.StatusCode.__members__.get(code, grpc.StatusCode.INTERNAL), details)


def _request_id(context) -> bytes | None:
    """The call's `x-request-id` metadata (routing.GRPC_METADATA), at most 256 bytes, or None."""
    for item in context.invocation_metadata() or ():
        if item.key == "x-request-id":
            value = item.value.encode() if isinstance(item.value, str) else bytes(item.value)
            return value[:256] or None
    return None


class _LateAnswer(logging.Filter):
    """grpc.aio logs an ERROR with a traceback when an answer meets a deadline that passed
    a moment before (the client already has DEADLINE_EXCEEDED, and nothing failed here);
    this says so in one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("ExecuteBatchError raised in core by servicer method"):
            record.msg, record.args, record.exc_info, record.exc_text = (
                "a call's deadline passed while its answer was being sent (the client has DEADLINE_EXCEEDED)", (),
                None, None)
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def _handlers(core: _Core) -> list:
    """One generic handler per service; messages stay bytes (no (de)serializer)."""
    services: dict[str, dict] = {}
    for index, path in enumerate(frames.METHODS):
        service, method = path.lstrip("/").split("/")

        async def behaviour(request: bytes, context, index=index) -> bytes:
            return await core.call(index, request, context)

        services.setdefault(service, {})[method] = grpc.unary_unary_rpc_method_handler(behaviour)
    return [grpc.method_handlers_generic_handler(s, methods) for s, methods in services.items()]


async def _serve(args) -> int:
    loop = asyncio.get_running_loop()
    lost, stop = loop.create_future(), loop.create_future()
    transport, core = await loop.create_unix_connection(lambda: _Core(lost, stop), args.core)
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", args.max_message_bytes),
        ("grpc.max_send_message_length", args.max_message_bytes),
        # Several front ends share the port only when asked; one alone owns it, so a second
        # server started on the same port fails instead of taking half the traffic.
        ("grpc.so_reuseport", int(args.reuse_port)),
    ])
    server.add_generic_rpc_handlers(_handlers(core))
    address = f"{args.host}:{args.port}"
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as e:  # grpc: "Failed to bind to address ..."
        message = f"gRPC cannot listen on {address} (is the port in use?): {e}"
        transport.write(frames.pack(frames.ERROR, 0, frames.error_payload("UNAVAILABLE", message)))
        transport.close()  # the model process reports it
        return 2
    await server.start()
    transport.write(frames.pack(frames.HELLO, 0, f"{port} {os.getpid()}".encode()))
    await asyncio.wait([lost, stop], return_when=asyncio.FIRST_COMPLETED)
    if stop.done():
        await server.stop(stop.result())  # the model process answers the calls in flight meanwhile
    else:
        logger.warning("the model server went away; gRPC front end %d stops", os.getpid())
        await server.stop(0)
    transport.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serving.server.grpc_front", description=__doc__.split("\n")[0])
    p.add_argument("--core", required=True, help="the model process's Unix socket")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True, help="0 picks a free port (sent back in HELLO)")
    p.add_argument("--reuse-port", action="store_true", help="share the port with other front ends")
    p.add_argument("--max-message-bytes", type=int, default=16 << 20)
    args = p.parse_args(argv)
    logs.configure(sys.stderr)
    logging.getLogger("grpc._cython.cygrpc").addFilter(_LateAnswer())
    # The model process decides when its front ends stop (a STOP frame, or its socket closing):
    # a signal sent to the whole process group (Ctrl-C, `kill -- -PGID`, systemd) reaches
    # them too, and must not make one leave before the model process knows it is stopping.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return uvloop.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
