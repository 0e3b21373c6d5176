"""SIGTERM ends a run where it can stop cleanly, saved, and says so.

A scheduler preempting a job, ``kill``, ``docker stop`` and a cluster draining a node all send
SIGTERM (then SIGKILL after a grace period). Python's default is to die on the spot, and
Lightning's own handler ends ``fit`` with exit status 0: either way the run looks finished or
loses the steps since its last state. zoo instead:

- while a training loop runs, only notes the signal; the loop stops at the end of the optimizer
  step in progress (after validation and the epoch's state, if the epoch was ending), saves the
  training state there, and raises :class:`~zoo.runs.stops.Terminated`;
- anywhere else (loading data, testing, exporting), raises it at once: nothing is half-written,
  every file zoo writes is renamed into place whole.

The command then writes ``summary.json`` with status ``interrupted`` and exits with 143 (128 +
SIGTERM), and ``zoo resume`` continues from the saved state to the weights an uninterrupted run
ends with. Lightning's loops carry the signal themselves (its ``SIGTERMException``, raised at a
batch end); Keras' ``fit`` has no such notion, so zoo's callback asks :func:`requested`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from zoo.runs.stops import Terminated

_state = {"received": False, "loops": 0}  # a SIGTERM came; training loops that stop on it themselves


def requested() -> bool:
    """Whether a SIGTERM came while a loop was running: it stops at its next clean point."""
    return _state["received"]


def _on_sigterm(signum, frame) -> None:
    _state["received"] = True
    if not _state["loops"]:
        raise Terminated()


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` for the duration (or is left to a loop, see
    :func:`loop_stops`); the handler before is put back after. Outside the main thread Python
    cannot set handlers, and the process keeps its own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    _state["received"] = False
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        _state["received"] = False


@contextlib.contextmanager
def loop_stops() -> Iterator[None]:
    """A training loop that stops on SIGTERM at its next clean point runs inside: the signal is
    only noted meanwhile (Lightning's own handler, which calls the one it found, does the same)."""
    _state["loops"] += 1
    try:
        yield
    finally:
        _state["loops"] -= 1
    if _state["received"]:  # the loop ended before it saw the signal: stop now
        raise Terminated()
