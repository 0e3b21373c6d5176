"""TensorFlow's C++ logging, kept off a command's stderr.

TensorFlow logs from C++ through absl and its own logger, straight to file descriptor 2: a
Keras run printed ``oneDNN custom operations are on``, ``Could not find cuda drivers``, ``E0000
... failed call to cuInit`` on a machine without a GPU, and dozens of grappler warnings
(``Not handling type DT_DOUBLE``) in an image run, with ``--quiet`` too. None of them is
something the user of a zoo command can act on. Two mechanisms are involved:

- what TensorFlow logs once it runs obeys ``TF_CPP_MIN_LOG_LEVEL``, which it reads when it is
  imported: :func:`quiet_native_logs` sets it to 3 (errors too: an error that stops a run reaches
  the user as the exception zoo reports, in one line);
- what its libraries log while they are loaded comes before absl's logging is initialised and
  ignores that variable (``WARNING: All log messages before absl::InitializeLog() is called are
  written to STDERR``): the import of ``tensorflow`` runs with file descriptor 2 captured, and
  what was captured is written back without those lines. A line of another kind (a Python
  warning, a library's print) is written back as it was; a C++ error or fatal line as one line
  without its timestamp and source prefix (``TensorFlow: ...``), since it may be the reason a
  run fails next.

A user who sets ``TF_CPP_MIN_LOG_LEVEL`` themselves (to debug TensorFlow) gets all of it, as
TensorFlow prints it: nothing is captured then.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
QUIET_LEVEL = "3"  # 0 all, 1 no INFO, 2 no WARNING, 3 no ERROR
# absl's and TensorFlow's line prefix: severity and date, time, thread id, source file:line.
_LOG_LINE = re.compile(rb"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+\s+[^\]\s]+:\d+\] ?(.*)$")
_BANNER = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# The second line of the CPU feature guard's message (``This TensorFlow binary is optimized...``).
_CONTINUATIONS = (b"To enable the following instructions:",)


def quiet_native_logs() -> None:
    """Keep TensorFlow's C++ logging off stderr in this process, from its import on: called by
    the ``zoo`` command before any subcommand runs (nothing is imported yet). Does nothing
    where the user set ``TF_CPP_MIN_LOG_LEVEL`` or TensorFlow is already imported."""
    if LEVEL_VARIABLE in os.environ or "tensorflow" in sys.modules:
        return
    os.environ[LEVEL_VARIABLE] = QUIET_LEVEL
    if not any(isinstance(finder, _QuietImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietImport())


def filtered(captured: bytes) -> bytes:
    """``captured`` stderr without absl's and TensorFlow's C++ log lines: INFO and WARNING lines
    and absl's banner dropped, ERROR and FATAL lines kept as ``TensorFlow: <message>``, anything
    else kept as it was."""
    kept = []
    for line in captured.splitlines(keepends=True):
        body = line.rstrip(b"\r\n")
        found = _LOG_LINE.match(body)
        if found is not None:
            if found.group(1) in b"EF":
                kept.append(b"TensorFlow: " + found.group(2) + b"\n")
        elif body != _BANNER and not body.startswith(_CONTINUATIONS):
            kept.append(line)
    return b"".join(kept)


@contextlib.contextmanager
def captured_stderr() -> Iterator[None]:
    """File descriptor 2 goes to a temporary file while the block runs (a file, not a pipe: a
    library that logs more than a pipe holds cannot block on it); what it caught is written
    back through :func:`filtered` afterwards, also when the block raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            os.write(2, filtered(sink.read()) or b"")


class _QuietImport(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` for the other finders and hands back their spec with a loader that
    runs the import under :func:`captured_stderr`. It stays in ``sys.meta_path`` until that
    import runs: libraries probe for TensorFlow with ``find_spec`` without importing it
    (torch's dynamo does, at its own import)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "tensorflow":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _CapturingLoader(spec.loader, self)
                return spec
        return None


class _CapturingLoader(importlib.abc.Loader):
    """The real loader, executing the module with stderr captured."""

    def __init__(self, loader: Any, finder: _QuietImport) -> None:
        self.loader, self.finder = loader, finder

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        with contextlib.suppress(ValueError):  # imported once: later imports are sys.modules'
            sys.meta_path.remove(self.finder)
        with captured_stderr():
            self.loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ...
        return getattr(self.loader, name)
