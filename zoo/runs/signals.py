"""SIGTERM and Ctrl-C (SIGINT) end a run where it can stop cleanly, saved, and say so.

A scheduler preempting a job, ``kill``, ``docker stop`` and a cluster draining a node all send
SIGTERM (then SIGKILL after a grace period); a user at a terminal presses Ctrl-C. Python's default
is to die on the spot (SIGTERM) or to raise ``KeyboardInterrupt`` in the middle of whatever runs,
an optimizer step included, and Lightning's own handlers end ``fit`` with exit status 0 (SIGTERM)
or 1: either way the run looks finished or loses the steps since its last state. zoo instead:

- while a training loop runs, only notes the signal; the loop stops at the end of the optimizer
  step in progress (after validation and the epoch's state, if the epoch was ending), saves the
  training state there, and raises :class:`~zoo.runs.stops.Terminated` (SIGTERM) or
  :class:`~zoo.runs.stops.Interrupted` (SIGINT);
- anywhere else (loading data, testing, exporting), raises it at once (``KeyboardInterrupt`` for
  Ctrl-C): nothing is half-written, every file zoo writes is renamed into place whole;
- a second Ctrl-C while the first waits for the step to end raises ``KeyboardInterrupt`` at once:
  the run stops promptly, keeping the state saved before, as users expect of a second Ctrl-C.

The command then writes ``summary.json`` with status ``interrupted`` and exits with 128 + the
signal's number, as a process killed by it reports (143 for SIGTERM, 130 for SIGINT), and
``zoo resume`` continues from the saved state to the weights an uninterrupted run ends with.
Lightning's loops carry the signal themselves (its ``SIGTERMException``, raised at a batch end;
zoo's Lightning callback raises its flag for a Ctrl-C too); Keras' ``fit`` has no such notion, so
zoo's callback asks :func:`requested`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from zoo.runs.stops import Interrupted, Terminated

# The signal that came while a loop was running (None: none yet); training loops that stop on it.
_state: dict = {"received": None, "loops": 0, "owner": None}  # owner: the process that set the handlers
HANDLED = (signal.SIGTERM, signal.SIGINT)
_WAITING = (
    b"\nzoo: Ctrl-C: stopping at the end of the step in progress, its training state saved "
    b"(Ctrl-C again stops at once)\n"
)


def requested() -> bool:
    """Whether SIGTERM or Ctrl-C came while a loop was running: it stops at its next clean point."""
    return _state["received"] is not None


def stop() -> Terminated:
    """The exception a loop that stopped on the signal received raises."""
    return Interrupted() if _state["received"] == signal.SIGINT else Terminated()


def _on_signal(signum, frame) -> None:
    if os.getpid() != _state["owner"]:
        # A forked DataLoader worker inherits the handler, and a terminal's Ctrl-C reaches the
        # whole process group: the training process stops the run (and its workers), once.
        return
    if signum == signal.SIGINT and (requested() or not _state["loops"]):
        raise KeyboardInterrupt  # a second Ctrl-C, or one outside a loop: at once
    if _state["received"] is None:
        _state["received"] = signum
        if signum == signal.SIGINT:  # os.write: print() is not safe inside a signal handler
            with contextlib.suppress(OSError):
                os.write(2, _WAITING)
    if not _state["loops"]:
        raise stop()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` and Ctrl-C ``KeyboardInterrupt`` for the duration (or
    they are left to a loop, see :func:`loop_stops`); the handlers before are put back after.
    Outside the main thread Python cannot set handlers, and the process keeps its own. A SIGINT
    that the process was started ignoring (``cmd &`` in a shell) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in HANDLED}
    for s in HANDLED:
        if previous[s] is not signal.SIG_IGN or s == signal.SIGTERM:
            signal.signal(s, _on_signal)
    _state["received"], _state["owner"] = None, os.getpid()
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        _state["received"] = None


stop_on_sigterm = stop_on_signals  # its name before Ctrl-C stopped runs the same way


@contextlib.contextmanager
def loop_stops() -> Iterator[None]:
    """A training loop that stops on SIGTERM or Ctrl-C at its next clean point runs inside: the
    signal is only noted meanwhile (Lightning's own SIGTERM handler, which calls the one it found,
    does the same)."""
    _state["loops"] += 1
    try:
        yield
    finally:
        _state["loops"] -= 1
    if requested():  # the loop ended before it saw the signal: stop now
        raise stop()
