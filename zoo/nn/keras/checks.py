"""Input checks that raise in eager mode and fail the step inside a TensorFlow graph.

Eagerly, a failed check raises :class:`zoo.nn.errors.InputError`, exactly as the torch
twin does. Inside ``fit`` or a ``tf.function`` no Python exception can be raised at run
time: the check becomes a ``tf.debugging.Assert`` carrying the same message, which fails
the step with ``tf.errors.InvalidArgumentError`` (:func:`zoo.nn.errors.input_error`
turns that back into the ``InputError``). Under XLA (``jit_compile``) TensorFlow drops
assertions: the check does nothing there.

Cost: a graph assertion needs its boolean on the host, one scalar copied back within the
step (not a Python-side synchronisation); a check on shapes alone, like BatchNorm's, reads
host-side shape tensors and costs nothing on a device.
"""

from __future__ import annotations

import tensorflow as tf

from zoo.nn.errors import GRAPH_END, GRAPH_MARK, InputError


def require(condition, message: str, *guarded):
    """Check ``condition`` (a scalar boolean tensor); return ``guarded`` ordered after the check.

    In a graph, tensors returned here cannot be computed before the assertion has passed,
    so an op that would fail on bad input in its own words (a gather out of range) runs
    only after the check reports it in zoo's.
    """
    if tf.executing_eagerly():
        if not bool(condition):
            raise InputError(message)
        return guarded[0] if len(guarded) == 1 else guarded
    check = tf.debugging.Assert(condition, [GRAPH_MARK + message + GRAPH_END])
    with tf.control_dependencies([check]):
        ordered = tuple(tf.identity(t) for t in guarded)
    return ordered[0] if len(ordered) == 1 else ordered
