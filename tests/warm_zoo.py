"""``zoo`` commands run in processes that start with torch, Lightning, TensorFlow and Keras
already imported: forked from a server that imported them once.

Tests start ~90 zoo commands (runs killed and resumed, signalled, same-start trainings),
and each paid 5-9 CPU-seconds importing the frameworks before its first step, a quarter of the
suite's CPU. Here a server process per pytest worker and environment imports them once, as the
``zoo`` command would (TensorFlow's C++ logging quieted first, :func:`zoo.cli.main`'s order), and
forks a child per command. The child is a real process: it gets the caller's stdin, stdout and
stderr (passed as file descriptors), its working folder, environment and arguments, and exits
through atexit and flushed output but not the module teardown (see _exit); signals reach it by its
pid, SIGKILL included. What it cannot be is the caller's child or part of its terminal's process
group, so a test of what a terminal's ctrl-c does, or of what a fresh process prints while it
imports, starts ``zoo`` itself.

:func:`run` and :class:`Popen` take the command lines tests write (``.venv/bin/zoo ARGS``,
``python -m zoo.cli ARGS``, or a Python script that runs zoo, ``python SCRIPT.py ARGS``) and
``subprocess``'s arguments; anything else goes to ``subprocess``. Each environment (less the
variables read only at run time) gets its own server, so a test whose processes each have their
own environment read at import (a data-parallel node's ``RANK``) starts them with ``subprocess``.
``ZOO_COLD_TESTS=1`` starts every command cold, as before.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# The variables that change under pytest between tests and that no zoo command reads: a server
# serves every environment equal to its own but for them.
_VOLATILE = ("PYTEST_CURRENT_TEST",)
# zoo reads its own variables (ZOO_CACHE, ZOO_NUM_THREADS, ...) when a command runs, never at
# import: a server imported with other values serves them too.
_READ_AT_RUN_TIME = "ZOO_"
_COLD = os.environ.get("ZOO_COLD_TESTS") == "1"


# What a server imports before it forks: zoo's command line in the order zoo.cli.main would (its
# TensorFlow logging quieted first; ``module:function`` is called), and for another interpreter
# (the reference environment's) the modules its caller names.
ZOO = ("zoo.native_logs:quiet_native_logs", "keras", "lightning.pytorch", "tensorflow", "torch", "zoo.cli")


def _warm_argv(command, preload) -> tuple[str, tuple[str, ...], list[str]] | None:
    """(interpreter, what its server imports, the child's ``sys.argv``) if ``command`` runs the
    zoo command line (``zoo ARGS``, ``python -m zoo.cli ARGS``) or a Python script (``python
    SCRIPT.py ARGS``): in this interpreter, or in another one that ``preload`` is given for.
    None for any other command."""
    if isinstance(command, (str, bytes)) or not command:
        return None
    parts = [str(p) for p in command]
    zoo = str(Path(sys.executable).with_name("zoo"))
    if Path(parts[0]).name == "zoo":
        return sys.executable, ZOO, [zoo, *parts[1:]]
    if len(parts) < 2:
        return None
    ours = Path(parts[0]).absolute() == Path(sys.executable).absolute()
    if ours and parts[1:3] == ["-m", "zoo.cli"]:
        return sys.executable, ZOO, [zoo, *parts[3:]]
    if (ours or preload) and parts[1].endswith(".py") and Path(parts[1]).is_file():
        return parts[0], tuple(preload or ZOO), [str(Path(parts[1]).absolute()), *parts[2:]]
    return None


def _key(env: dict[str, str]) -> tuple:
    return tuple(
        sorted((k, v) for k, v in env.items() if k not in _VOLATILE and not k.startswith(_READ_AT_RUN_TIME))
    )


class _Server:
    """One pre-imported process serving commands in one environment."""

    def __init__(self, interpreter: str, preload: tuple[str, ...], env: dict[str, str]):
        self.folder = tempfile.mkdtemp(prefix="zoo-warm-")
        self.address = os.path.join(self.folder, "socket")
        self.process = subprocess.Popen(
            [interpreter, __file__, self.address, str(os.getpid()), *preload],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.commands = 0  # running now
        atexit.register(self.close)

    def connect(self) -> socket.socket:
        deadline = time.monotonic() + 600  # its imports, on cores other tests keep busy
        while True:
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                client.connect(self.address)
                return client
            except (FileNotFoundError, ConnectionRefusedError):
                client.close()
                if self.process.poll() is not None or time.monotonic() > deadline:
                    ended = self.process.returncode
                    raise RuntimeError(f"the warm zoo server did not start (exit {ended})") from None
                time.sleep(0.05)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()  # it holds nothing to save; an interpreter's exit with TensorFlow took 5 s
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_servers: dict[tuple, _Server] = {}  # the most recently used last
_lock = threading.Lock()
# Each server holds ~1 GB (torch, TensorFlow, Keras imported), and a test file uses one zoo
# environment and the reference environment's: more would hold memory the heaviest tests need.
SERVERS = 2
# Below this much available memory at the end of a test file, its worker's idle servers end
# (conftest, see release_if_short); above it they serve the next files, which then skip their
# imports (a zoo server's are 9 s, the reference environment's 5 s, on a quiet core).
KEEP_ABOVE = 8 * 2**30


def _server(interpreter: str, preload: tuple[str, ...], env: dict[str, str]) -> _Server:
    with _lock:
        key = (interpreter, preload, _key(env))
        server = _servers.pop(key, None)
        if server is None or server.process.poll() is not None:
            idle = [k for k, s in _servers.items() if not s.commands]  # never one a command still runs in
            for old in idle[: max(0, len(_servers) - SERVERS + 1)]:
                _servers.pop(old).close()
            server = _Server(interpreter, preload, env)
        _servers[key] = server
        return server


def close_all() -> None:
    """End every idle server."""
    with _lock:
        for key in [k for k, server in _servers.items() if not server.commands]:
            _servers.pop(key).close()


def release_if_short(keep_above: int = KEEP_ABOVE) -> None:
    """End every idle server if the machine has less than ``keep_above`` bytes available: a
    worker's next test file may be one that needs them (a Gemma ONNX export once took a worker
    to 16.5 GB, and three idle servers beside it to the OOM killer)."""
    from zoo.peak_memory import kernel_available_bytes  # the tests set ZOO_AVAILABLE_MEMORY=unlimited

    available = kernel_available_bytes()
    if available is None or available < keep_above:
        close_all()


def _fd(stream, default: int, opened: list, pipes: list, text: bool):
    """A file descriptor for subprocess's stdin/stdout/stderr argument ``stream``."""
    if stream is None:
        return default
    if stream == subprocess.DEVNULL:
        handle = open(os.devnull, "r+b")  # noqa: SIM115 (closed once sent)
        opened.append(handle)
        return handle.fileno()
    if stream == subprocess.PIPE:
        read, write = os.pipe()
        opened.append(os.fdopen(write, "wb"))
        pipes.append(os.fdopen(read, "r" if text else "rb"))
        return write
    if isinstance(stream, int):
        return stream
    return stream.fileno()


_WARM_OPTIONS = {"env", "cwd", "stdin", "stdout", "stderr", "text", "start_new_session"}


class Popen:
    """``subprocess.Popen`` for a zoo command, in a warm process, with the part tests use: ``pid``,
    ``send_signal``, ``kill``, ``terminate``, ``poll``, ``wait``, ``returncode`` (``-N`` for a
    death by signal N) and ``stdout``/``stderr`` for PIPE. Other commands, or other options,
    start cold through ``subprocess``."""

    def __init__(self, command, preload: tuple[str, ...] = (), **options):
        self.args = command
        self.returncode: int | None = None
        self.stdout = self.stderr = None
        self._cold = None
        warm = _warm_argv(command, preload)
        if _COLD or warm is None or set(options) - _WARM_OPTIONS:
            self._cold = subprocess.Popen(command, **options)
            self.pid, self.stdout, self.stderr = self._cold.pid, self._cold.stdout, self._cold.stderr
            return
        env = dict(os.environ if options.get("env") is None else options["env"])
        text = bool(options.get("text"))
        opened: list = []
        fds = []
        for number, name in enumerate(("stdin", "stdout", "stderr")):
            pipes: list = []
            fds.append(_fd(options.get(name), number, opened, pipes, text))
            if pipes and name != "stdin":
                setattr(self, name, pipes[0])
        interpreter, preload, argv = warm
        self._server = _server(interpreter, preload, env)
        self._socket = self._server.connect()
        self._server.commands += 1
        request = {"argv": argv, "cwd": str(options.get("cwd") or os.getcwd()), "env": env,
                   "session": bool(options.get("start_new_session"))}  # fmt: skip
        socket.send_fds(self._socket, [json.dumps(request).encode() + b"\n"], fds)
        for handle in opened:
            handle.close()
        self._buffer = b""
        self.pid = int(self._line(None))

    def _line(self, timeout: float | None) -> bytes:
        """The server's next line: the child's pid, then its wait status once it ended."""
        self._socket.settimeout(timeout)
        while b"\n" not in self._buffer:
            try:
                more = self._socket.recv(4096)
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
            if not more:
                raise RuntimeError("the warm zoo server ended before the command")
            self._buffer += more
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def poll(self) -> int | None:
        if self._cold is not None:
            self.returncode = self._cold.poll()
        elif self.returncode is None and (
            b"\n" in self._buffer or select.select([self._socket], [], [], 0)[0]
        ):
            self.wait()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self._cold is not None:
            self.returncode = self._cold.wait(timeout)
        elif self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(int(self._line(timeout)))
            self._socket.close()
            self._server.commands -= 1
        return self.returncode

    def communicate(self, timeout: float | None = None):
        if self._cold is not None:
            out, err = self._cold.communicate(timeout=timeout)
            self.returncode = self._cold.returncode
            return out, err
        out = self.stdout.read() if self.stdout else None
        err = self.stderr.read() if self.stderr else None
        self.wait(timeout)
        return out, err

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def run(command, *, capture_output=False, timeout=None, check=False, input=None, preload=(), **options):
    """``subprocess.run`` for a zoo command, in a warm process (see the module's docstring)."""
    if _COLD or _warm_argv(command, preload) is None or input is not None or set(options) - _WARM_OPTIONS:
        return subprocess.run(
            command, capture_output=capture_output, timeout=timeout, check=check, input=input, **options
        )
    text = bool(options.get("text"))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        if capture_output:
            options.update(stdout=out, stderr=err)
        process = Popen(command, preload, **{**options, "text": False})
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        captured = []
        for name, handle in (("stdout", out), ("stderr", err)):
            handle.seek(0)
            data = handle.read() if options.get(name) is handle else None
            captured.append(data.decode() if text and data is not None else data)
    result = subprocess.CompletedProcess(command, process.returncode, *captured)
    if check:
        result.check_returncode()
    return result


# ------------------------------------------------------------------------------ the server


def _child(request: dict, fds: list[int]) -> None:
    """In the forked process: become the command, run it, and exit as the interpreter would."""
    if request["session"]:
        os.setsid()
    else:
        os.setpgid(0, 0)  # its own process group, as a shell would start it; signals go to it alone
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = request["argv"]
    sys.path[0] = os.path.dirname(sys.argv[0])  # the script's folder, as Python puts it first
    for sig in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    try:
        if sys.argv[0].endswith(".py"):
            runpy.run_path(sys.argv[0], run_name="__main__")
        else:
            from zoo.cli import main

            main(args=sys.argv[1:], prog_name="zoo")
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
    except BaseException as error:
        sys.excepthook(*sys.exc_info())
        # An interrupt nothing caught ends the process by SIGINT, as Python ends it.
        _exit(1, signal.SIGINT if isinstance(error, KeyboardInterrupt) else None)
    _exit(code)


def _exit(code: int, by: int | None = None) -> None:
    """The interpreter's exit without its module teardown: atexit handlers and flushed output as
    a fresh process has them, but not the 4-5 s that freeing TensorFlow's and torch's modules
    took (a cold Lightning run never loaded TensorFlow, so never paid it)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if by is not None:
        signal.signal(by, signal.SIG_DFL)
        os.kill(os.getpid(), by)
    os._exit(code)


def _serve(address: str, parent: int, preload: list[str]) -> None:
    for name in preload:
        module, _, function = name.partition(":")
        imported = importlib.import_module(module)
        if function:
            getattr(imported, function)()

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(8)
    listener.settimeout(1.0)

    def reap(connection: socket.socket, pid: int) -> None:
        _, status = os.waitpid(pid, 0)
        with contextlib.suppress(OSError):  # a caller that went away
            connection.sendall(f"{status}\n".encode())
        connection.close()

    while os.getppid() == parent:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            continue
        connection.settimeout(None)
        message, fds, _, _ = socket.recv_fds(connection, 1 << 22, 3)
        while message and not message.endswith(b"\n"):
            message += (more := connection.recv(1 << 22))
            if not more:
                message = b""
        if not message or len(fds) != 3:  # a client that went away (or a probe)
            for fd in fds:
                os.close(fd)
            connection.close()
            continue
        request = json.loads(message)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            listener.close()
            connection.close()
            _child(request, fds)  # never returns
        for fd in fds:
            os.close(fd)
        connection.sendall(f"{pid}\n".encode())
        threading.Thread(target=reap, args=(connection, pid), daemon=True).start()
    shutil.rmtree(os.path.dirname(address), ignore_errors=True)  # the caller ended without closing it


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # Python put tests/ first on the path; a module there must not shadow what the preloads
    # import. The slot stays: a child puts its script's folder there.
    sys.path[0] = os.path.dirname(sys.argv[1])
    _serve(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
