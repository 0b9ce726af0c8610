"""Beam's SDK worker pool for the portable runner's EXTERNAL environment, on loopback only.

`python -m apache_beam.runners.worker.worker_pool_main` listens on every interface; this is
the same servicer (it starts one `python -m ... SdkHarness` process per worker the job
server asks for, with the `python` on PATH) bound to 127.0.0.1. scripts/beam_portable.sh
starts it beside Beam's job service.

    python -m runner.beam_worker_pool --port 15000
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import grpc
from apache_beam.portability.api import beam_fn_api_pb2_grpc
from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer
from apache_beam.utils import thread_pool_executor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = grpc.server(thread_pool_executor.shared_unbounded_instance(),
                         options=[("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0)])
    if not server.add_insecure_port(f"127.0.0.1:{args.port}"):
        raise SystemExit(f"beam worker pool: cannot listen on 127.0.0.1:{args.port}")
    pool = BeamFnExternalWorkerPoolServicer(use_process=True, data_buffer_time_limit_ms=-1)
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, server)
    server.start()
    logging.info("beam worker pool listening on 127.0.0.1:%d", args.port)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
