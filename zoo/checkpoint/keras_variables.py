"""A Keras twin's variables to and from canonical tensors, through its weight table.

The weight table (:mod:`zoo.checkpoint.tables`) says which variable holds which tensors and how
the layouts convert; this module does the reading and the assigning as a checkpoint save or load
needs them: views of TensorFlow's buffers where no copy is needed, one cache-blocked copy where a
layout changes (into the memory of a tensor already used, :class:`Spares`), and memory handed to
a variable through DLPack where nothing else holds it. Keras and TensorFlow are imported only
when a twin of theirs is at hand.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor
from itertools import repeat

import numpy as np

from zoo.checkpoint.aligned import ALIGNMENT, aligned_view, contiguous
from zoo.checkpoint.tables import Port, keras_layer
from zoo.checkpoint.writer import TensorStream


def keras_to_tensors(model, table: Sequence[Port], *, pool: Executor | None = None) -> dict[str, np.ndarray]:
    """Read a Keras twin's variables into canonical (torch-layout) numpy arrays, each with
    memory of its own.

    Each variable is read once, as a view of TensorFlow's own buffer; a layout change
    (a transposed kernel) is then the one copy, made cache-blocked (:func:`contiguous`),
    with a thread ``pool`` on several ports at once.
    """
    views = [
        [_variable_view(keras_layer(keras_layer(model, port.layer), v)) for v in port.variables]
        for port in table
    ]  # read in this thread: the copies below need no framework

    def port_tensors(port: Port, values: list[np.ndarray]) -> list[tuple[str, np.ndarray]]:
        tensors = []
        for spec, array in zip(port.tensors, port.to_torch(*values), strict=True):
            array = np.asarray(array)
            if array.dtype != np.dtype(spec.dtype):
                array = array.astype(spec.dtype)  # a copy of its own
            elif not array.flags.c_contiguous:
                array = contiguous(array)
            elif any(np.may_share_memory(array, value) for value in values):
                array = array.copy()
            tensors.append((spec.name, array))
        return tensors

    ports = pool.map(port_tensors, table, views) if pool else map(port_tensors, table, views)
    return dict(pair for pairs in ports for pair in pairs)


def keras_tensor_stream(model, table: Sequence[Port]) -> TensorStream:
    """A Keras twin's weights as a save writes them: laid out from the table before any
    variable is read, then made port by port in this thread, each a view of its variable in
    torch's layout (a transposed kernel is a strided view, which the writer copies a band
    at a time), so the writer's threads write one port while this one reads the next."""

    def arrays() -> Iterator[tuple[str, np.ndarray]]:
        for port in table:
            layer = keras_layer(model, port.layer)
            values = [_variable_view(keras_layer(layer, v)) for v in port.variables]
            for spec, array in zip(port.tensors, port.to_torch(*values), strict=True):
                yield spec.name, np.asarray(array).astype(spec.dtype, copy=False)

    return TensorStream({s.name: (s.shape, np.dtype(s.dtype)) for p in table for s in p.tensors}, arrays())


def _variable_view(variable) -> np.ndarray:
    """The variable's current value without a copy where the backend allows (TensorFlow on
    the CPU: a numpy view of the read tensor's buffer, which keeps that buffer alive). Not
    ``np.asarray(variable)``: Keras' ``__array__`` goes through ``.numpy()``, a copy. A
    ``tf.Variable``'s own ``value()`` is the read op alone, a third of the time that
    ``tf.convert_to_tensor``'s dispatch takes to reach it (gpt2's 148 variables: 0.05 s,
    not 0.08-0.17 s, on a busy machine)."""
    import keras

    if not isinstance(variable, keras.Variable):  # a weight made when read (zoo.nn.keras.quantized)
        return np.asarray(keras.ops.convert_to_tensor(variable))
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        value = variable.value
        return np.asarray(value.value() if isinstance(value, tf.Variable) else tf.convert_to_tensor(value))
    return np.asarray(keras.ops.convert_to_tensor(variable))


def keras_arrays(
    table: Sequence[Port], tensors: dict[str, np.ndarray], pool: Executor | None = None
) -> list[np.ndarray]:
    """Every Keras variable's value, in table order, in the Keras layout and C order (one
    cache-blocked copy where the layout differs, none where it is shared). Pure numpy, no
    model: with a thread ``pool`` the ports' copies run side by side (numpy releases the GIL
    while it copies), which a checkpoint load uses (``zoo.checkpoint.tensors``)."""
    ports = (pool.map if pool else map)(port_arrays, table, repeat(tensors))
    return [array for arrays in ports for array in arrays]


def port_arrays(port: Port, tensors: dict[str, np.ndarray], spares: Spares | None = None) -> list[np.ndarray]:
    """One port's Keras variables' values, as :func:`keras_arrays` makes them; a copy goes
    into one of ``spares`` where one of its size is free."""
    inputs = [tensors[s.name] for s in port.tensors]
    arrays = [np.asarray(a) for a in port.to_keras(*inputs)]
    arrays = [
        a if a.flags.c_contiguous else contiguous(a, out=spares.take(a.shape, a.dtype) if spares else None)
        for a in arrays
    ]
    if spares:
        spares.used(zip((s.name for s in port.tensors), inputs, strict=True), arrays)
    return arrays


class Spares:
    """Freshly read arrays whose values are used up (their kernels are transposed), written
    again as the copies that later ports make: a load touches fresh memory once, not twice.

    The first write to a fresh page faults and the kernel zeroes it: a (4096, 1024) kernel
    transposed in column bands into fresh memory runs at 0.65-0.97 GB/s here, into memory
    already written at 1.6 GB/s. An array is free once every port that reads it has run and
    no port's output is a view of it (a variable adopts it); only whole ``aligned_empty``
    arrays are kept, so that what a variable adopts is exactly its own memory. Thread-safe:
    a load's ports run on a pool."""

    def __init__(self, table: Sequence[Port]) -> None:
        self._reads = Counter(s.name for p in table for s in p.tensors)
        self._adopted: set[int] = set()  # roots of outputs that are views, kept by variables
        self._free: dict[int, list[np.ndarray]] = defaultdict(list)  # nbytes -> roots
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...], dtype) -> np.ndarray | None:
        """Aligned memory of a free array of exactly this size, or None."""
        dtype = np.dtype(dtype)
        with self._lock:
            free = self._free.get(math.prod(shape) * dtype.itemsize)
            root = free.pop() if free else None
        return None if root is None else aligned_view(root, shape, dtype)

    def used(self, inputs: Iterable[tuple[str, np.ndarray]], outputs: list[np.ndarray]) -> None:
        """A port has read ``inputs`` (name, array) and made ``outputs``."""
        with self._lock:
            self._adopted.update(id(_root(o)) for o in outputs)
            for name, array in inputs:
                self._reads[name] -= 1
                root = _root(array)
                whole = root.nbytes - array.nbytes == ALIGNMENT and array.size
                if not self._reads[name] and whole and id(root) not in self._adopted:
                    self._free[array.nbytes].append(root)


def tensors_to_keras(
    model,
    table: Sequence[Port],
    tensors: dict[str, np.ndarray],
    *,
    handed_over: bool = False,
    arrays: list[np.ndarray] | None = None,
) -> list:
    """Assign canonical arrays to a built Keras twin's variables, checking every shape; returns
    the variables assigned, in table order. ``arrays`` are ``keras_arrays(table, tensors)``
    where the caller has made them already.

    Each variable gets one TensorFlow tensor, which it keeps as its value (assigning a
    tensor does not copy it). Memory that no caller holds (a transposed or fused copy) is
    handed to its variable through DLPack with no copy at all; so is each of ``tensors``
    where the caller gives them away (``handed_over``: a checkpoint's freshly read arrays).
    The caller's arrays otherwise, and every dtype change, cost exactly one copy.
    """
    from zoo.nn.keras.skeleton import fill  # zoo.nn.keras's __init__ imports Keras

    arrays = keras_arrays(table, tensors) if arrays is None else arrays
    callers = {id(_root(a)) for a in tensors.values()}
    adoptable = {id(_root(a)) for a in arrays if handed_over or id(_root(a)) not in callers}
    assigned, values = [], iter(arrays)
    for port in table:
        layer = keras_layer(model, port.layer)
        for variable_name in port.variables:
            variable, array = keras_layer(layer, variable_name), next(values)
            if tuple(variable.shape) != array.shape:
                raise ValueError(
                    f"{port.layer}.{variable_name}: Keras variable has shape "
                    f"{tuple(variable.shape)}, the weight table produced {array.shape}"
                )
            fill(variable, _variable_value(array, np.dtype(variable.dtype), adoptable))
            assigned.append(variable)
    return assigned


def _variable_value(array: np.ndarray, dtype: np.dtype, adoptable: set[int]):
    """A backend tensor holding ``array`` as ``dtype``, with at most one copy. The whole of an
    ``adoptable`` array (its root may be longer by ``aligned_empty``'s padding) is wrapped,
    not copied, once: no variable aliases another or keeps alive memory beyond its own."""
    import keras

    if array.dtype != dtype:
        array = np.require(array.astype(dtype), requirements="C")
        ours = True
    else:
        root = _root(array)
        ours = id(root) in adoptable and 0 <= root.nbytes - array.nbytes <= ALIGNMENT
        adoptable.discard(id(root))
    # DLPack takes numpy's own number types only: ml_dtypes' bfloat16 (kind "V") goes by a copy.
    dlpack = array.dtype.kind in "iufc"
    aligned = array.ctypes.data % ALIGNMENT == 0
    adopt = ours and dlpack and array.flags.writeable and aligned and array.size
    if adopt and keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
    return keras.ops.convert_to_tensor(array)


def _root(array: np.ndarray) -> np.ndarray:
    """The array that owns ``array``'s memory."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array
