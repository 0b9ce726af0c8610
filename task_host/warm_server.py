"""The warm TFX runtime: TensorFlow, TFX, Beam, TFDV, TFMA and the project imported once;
every `retrain ...` command a client sends runs in a fresh forked child (protocol: task_host/protocol.py).

    python -m task_host.warm_server --socket PATH     serve (the Airflow scripts start one per host)
    python -m task_host.warm_server --socket PATH --ping

Per request the server forks a *monitor*, which forks the *command* (new session: its own
process group, which the client may kill), hands the client the command's pid, waits for
it and sends its exit code. A command that crashes or is killed takes down only itself; a
client that disconnects takes its command down with it. The server itself only imports,
accepts and forks, so it holds no state a command could corrupt.

Fork safety, as measured here (tests/task_host/test_warm_server.py): after the imports the
server has Python's main thread plus native threads started at import by Arrow's jemalloc
(`jemalloc_bg_thd`, which re-initialises itself in a child via pthread_atfork) and by
TensorFlow/Arrow's pools (idle; their libraries register fork handlers). Nothing is run
before the fork: no TensorFlow op or eager context, no gRPC channel or server, no Beam
pipeline, no ML Metadata connection; all of that happens in the child. TensorFlow's
import-time settings (TF_USE_LEGACY_KERAS, TF_CPP_MIN_LOG_LEVEL, ...) are the server's,
so requests whose import-time environment differs are refused and run cold.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import runpy
import select
import signal
import socket
import sys
import threading
import time
import traceback

from core import source_hash
from task_host import client, proctitle, protocol

# What a node run imports: the launcher (TFX, TF, TFMA through input resolution), the
# executors of the standard components and of ours, the libraries they load lazily.
PRELOAD = (
    "retrain.cli", "runner.runs", "runner.node_runner", "governance.record", "governance.report",
    "tfx.components", "tfx.components.example_gen.csv_example_gen.executor",
    "tfx.components.statistics_gen.executor", "tfx.components.example_validator.executor",
    "tfx.components.transform.executor", "tfx.components.trainer.executor", "tfx.components.evaluator.executor",
    "tensorflow_transform.beam", "tensorflow_data_validation", "tensorflow_model_analysis",
    "components.evaluator.executor", "components.trainer.executor", "components.atomic_pusher.executor",
    "components.example_gen.executor", "components.statistics_gen.executor",
    "components.data_gate.component", "components.serving_skew.executor", "components.serving_check.executor",
    "serving.server.request_log", "serving.server.main", "grpc",
    # Signing a pushed version (serving/repository/signing.py): 1.25 s a run when forked without it.
    "model_signing.hashing", "model_signing.signing", "model_signing.verifying",
)
CLI_MODULE = "retrain.cli"
# The model server: the pre-push serving check starts one per run (components/serving_check).
SERVING_MODULE = "serving"
MODULES = (CLI_MODULE, SERVING_MODULE)
_KILL_GRACE_S = 10.0
log = logging.getLogger("task_host.warm_server")


def native_threads() -> list[str]:
    """The names of this process's OS threads (Python's and libraries' native ones)."""
    names = []
    for tid in sorted(os.listdir("/proc/self/task")):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            continue
    return names


def _run_command(request: dict, out_fd: int, err_fd: int, started_fd: int) -> None:
    """In the command's child: its session, output, environment and argv, then the CLI.
    Never returns."""
    code = 1
    try:
        os.setsid()  # before the client learns the pid: killing the group must reach it
        os.write(started_fd, b"1")
        os.close(started_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.close(null)
        for fd in {out_fd, err_fd}:
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        sys.stdout.reconfigure(line_buffering=True)
        sys.stderr.reconfigure(line_buffering=True)
        # Logging as a fresh interpreter has it (the CLI configures its own).
        for handler in list(logging.root.handlers):
            logging.root.removeHandler(handler)
        logging.root.setLevel(logging.WARNING)
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.update(request["import_env"])  # what importing would have set in a cold process
        os.chdir(request["cwd"])
        # Not the server's command line in `ps`: the command's own (a node names itself more precisely).
        proctitle.set_title(proctitle.command_title("retrain", request["argv"]) if request["module"] == CLI_MODULE
                            else proctitle.command_title(f"python -m {request['module']}", request["argv"]))
        if request["module"] == CLI_MODULE:
            # By name, as PRELOAD: the host runs the CLI's commands, it does not depend on them.
            sys.argv = ["retrain", *request["argv"]]
            importlib.import_module(CLI_MODULE).entry_point(request["argv"])  # exits with the command's code
        sys.argv = [request["module"], *request["argv"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:  # argparse (usage errors: 2) and explicit exits
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _monitor(conn: socket.socket, request: dict, out_fd: int, err_fd: int) -> None:
    """In the monitor child: runs the command, reports its pid and exit code. Never returns."""
    try:
        proctitle.set_title(proctitle.command_title("retrain-warm monitor", request["argv"]))
        started_r, started_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            conn.close()
            os.close(started_r)
            _run_command(request, out_fd, err_fd, started_w)
        for fd in {out_fd, err_fd}:
            os.close(fd)
        os.close(started_w)
        os.read(started_r, 1)  # its own process group now (or it died: then waitpid says so)
        os.close(started_r)
        stopping: list[bool] = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        protocol.send_frame(conn, {"pid": pid})
        client_gone, killed_at = False, None
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if not client_gone:
                    protocol.send_frame(conn, {"exit": os.waitstatus_to_exitcode(status)})
                break
            if client_gone:
                time.sleep(0.2)
            else:
                readable, _, _ = select.select([conn], [], [], 0.2)
                client_gone = bool(readable) and not conn.recv(1, socket.MSG_PEEK)
            if (client_gone or stopping) and killed_at is None:  # the client went away, or we are stopped
                killed_at = time.monotonic()
                _killpg(pid, signal.SIGTERM)
            if killed_at is not None and time.monotonic() - killed_at > _KILL_GRACE_S:
                _killpg(pid, signal.SIGKILL)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(0)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


class Server:
    def __init__(self, socket_path: str, preload: tuple[str, ...] = PRELOAD, modules: tuple[str, ...] = MODULES):
        self.socket_path = os.path.abspath(socket_path)
        self.preload = preload
        self.modules = modules  # what `python -m` may run here
        self.fingerprint = ""
        self.ready_s = 0.0
        self.env = dict(os.environ)  # before the imports: what a cold process starts with
        self.import_env: dict[str, str] = {}  # what the imports set (a cold process sets it too)
        self.served = 0

    def load(self) -> None:
        start = time.monotonic()
        # The fingerprint of the code before importing it: a file changed during the imports
        # makes the first request's check fail and the server restart, never run stale code.
        self.fingerprint = source_hash.runtime_fingerprint()
        self.env = dict(os.environ)
        # Importing it sets TF_USE_LEGACY_KERAS... as it does in a cold process.
        from core import keras_env

        keras_env.ensure_legacy_keras()
        for name in self.preload:
            importlib.import_module(name)
        self.import_env = {k: v for k, v in os.environ.items() if self.env.get(k) != v}
        self.ready_s = time.monotonic() - start
        log.info("imported %d modules in %.1f s (%d modules loaded); threads at fork: %s; code %s",
                 len(self.preload), self.ready_s, len(sys.modules), native_threads(), self.fingerprint[:12])
        if threading.active_count() != 1:
            log.warning("Python threads at fork time: %s", [t.name for t in threading.enumerate()])

    def bind(self) -> socket.socket | None:
        if len(self.socket_path.encode()) > 107:
            raise SystemExit(f"warm runtime: socket path over 107 bytes (a Unix socket limit): {self.socket_path}")
        if os.path.exists(self.socket_path):
            if client.ping(self.socket_path) is not None:
                log.info("a warm runtime already answers at %s", self.socket_path)
                return None
            os.unlink(self.socket_path)  # left by a server that died
        os.makedirs(os.path.dirname(self.socket_path), exist_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = f"{self.socket_path}.{os.getpid()}"
        listener.bind(tmp)
        os.chmod(tmp, 0o600)  # it runs commands with the caller's environment: owner only
        os.rename(tmp, self.socket_path)  # clients never see a socket nobody listens on
        listener.listen(64)
        return listener

    def argv(self) -> list[str]:
        """The arguments that start this server again (a restart after a code change)."""
        out = ["--socket", self.socket_path]
        if self.preload != PRELOAD:
            out += ["--preload", ",".join(self.preload)]
        if self.modules != MODULES:
            out += ["--modules", ",".join(self.modules)]
        return out

    def refusal(self, request: dict) -> str | None:
        if request.get("fingerprint") != self.fingerprint:
            return "the project's code changed since this warm runtime imported it (it restarts)"
        if os.path.abspath(request.get("python", "")) != os.path.abspath(sys.executable):
            return f"interpreter {request.get('python')!r} is not this runtime's ({sys.executable})"
        differ = protocol.env_difference(self.env, request.get("env", {}))
        if differ and not protocol.env_difference({**self.env, **self.import_env}, request.get("env", {})):
            differ = []  # started by a command of ours: its environment holds what the imports set
        if differ:
            return f"import-time environment differs from this runtime's: {', '.join(differ)}"
        if request.get("module") not in self.modules:
            return f"module {request.get('module')!r} is not run here (only {', '.join(self.modules)})"
        if not isinstance(request.get("argv"), list) or not isinstance(request.get("cwd"), str):
            return "a request needs argv (a list) and cwd"
        return None

    def handle(self, conn: socket.socket) -> bool:
        """Serves one connection; False when the server must restart (its code changed)."""
        fds: set[int] = set()
        try:
            conn.settimeout(10.0)
            if conn.recv(1, socket.MSG_PEEK) != b"F":  # not a command (which starts with its pipe): a ping
                message = protocol.recv_frame(conn) or {}
                if message.get("ping"):
                    protocol.send_frame(conn, {"fingerprint": self.fingerprint, "pid": os.getpid(),
                                           "ready_s": round(self.ready_s, 2), "served": self.served,
                                           "threads": native_threads(),
                                           "python_threads": [t.name for t in threading.enumerate()]})
                return True
            out_fd, err_fd = protocol.recv_fds(conn)
            fds = {out_fd, err_fd}
            request = protocol.recv_frame(conn) or {}
            refused = self.refusal(request)
            if refused:
                protocol.send_frame(conn, {"refused": refused})
                log.warning("refused %s: %s", request.get("argv"), refused)
                return source_hash.runtime_fingerprint() == self.fingerprint
            sys.stdout.flush()
            sys.stderr.flush()
            if os.fork() == 0:
                self._listener.close()
                _monitor(conn, {**request, "import_env": self.import_env}, out_fd, err_fd)
            self.served += 1
            log.info("started %s", " ".join(request["argv"]))
            return True
        except (OSError, protocol.ProtocolError, ValueError) as e:
            log.warning("bad request: %s", e)
            return True
        finally:
            for fd in fds:
                os.close(fd)
            conn.close()

    def serve(self) -> int:
        if client.ping(self.socket_path) is not None:  # before ~15 s of imports, not after
            log.info("a warm runtime already answers at %s", self.socket_path)
            return 0
        self.load()
        listener = self.bind()
        if listener is None:
            return 0
        self._listener = listener
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
        log.info("warm TFX runtime ready at %s (pid %d)", self.socket_path, os.getpid())
        try:
            while not stop:
                _reap()
                readable, _, _ = select.select([listener], [], [], 1.0)
                if not readable:
                    continue
                conn, _ = listener.accept()
                if not self.handle(conn):
                    log.warning("the project's code changed: restarting to import it afresh")
                    listener.close()
                    os.unlink(self.socket_path)
                    os.execv(sys.executable, [sys.executable, "-m", "task_host.warm_server", *self.argv()])
        except InterruptedError:
            pass
        finally:
            if os.path.exists(self.socket_path):
                os.unlink(self.socket_path)
        log.info("stopped")
        return 0


def _reap() -> None:
    """Collects finished monitors (a restarted server also collects its predecessor's)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m task_host.warm_server", description=__doc__.split("\n")[0])
    p.add_argument("--socket", default=os.environ.get(protocol.SOCKET_ENV), required=protocol.SOCKET_ENV not in os.environ,
                   help=f"Unix socket path (default: ${protocol.SOCKET_ENV})")
    p.add_argument("--ping", action="store_true", help="print the running server's state; exit 1 if none answers")
    p.add_argument("--preload", help="comma-separated modules to import instead of the node runner's set")
    p.add_argument("--modules", default=",".join(MODULES),
                   help=f"comma-separated modules clients may run with -m (default {','.join(MODULES)})")
    args = p.parse_args(argv)
    if args.ping:
        state = client.ping(args.socket)
        print(state if state else f"no warm runtime answers at {args.socket}")
        return 0 if state else 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s warm-runtime %(levelname)s %(message)s",
                        stream=sys.stderr)
    preload = tuple(args.preload.split(",")) if args.preload else PRELOAD
    return Server(args.socket, preload, tuple(args.modules.split(","))).serve()


if __name__ == "__main__":
    sys.exit(main())
