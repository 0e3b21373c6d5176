"""A built twin's weights in and out, as the common checkpoint's canonical tensors.

The one place that knows both frameworks' model types: the checkpoint format (zoo.checkpoint)
stays numpy and metadata, and each backend loads a checkpoint through :func:`load_torch` or
:func:`load_keras` here. Torch and TensorFlow are imported only when a model of theirs is
at hand, so reading or validating a file never starts a framework.
"""

from __future__ import annotations

import importlib
import sys
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from zoo import registry
from zoo.checkpoint.file import as_float32, check_finite, finite, read_aligned, refuse_nonfinite
from zoo.checkpoint.keras_variables import (
    Spares,
    keras_arrays,
    keras_tensor_stream,
    keras_to_tensors,
    port_arrays,
    tensors_to_keras,
)
from zoo.checkpoint.tables import Port, keras_layer, tensor_specs
from zoo.checkpoint.writer import IO_THREADS, TensorStream

if TYPE_CHECKING:
    from zoo.checkpoint.metadata import Checkpoint


def framework_of(model: Any) -> str:
    """``lightning`` or ``keras``: which twin ``model`` is, without importing either framework."""
    torch, keras = sys.modules.get("torch"), sys.modules.get("keras")
    if torch is not None and isinstance(model, torch.nn.Module):
        return "lightning"
    if keras is not None and isinstance(model, keras.Model):
        return "keras"
    raise TypeError(f"{type(model).__name__} is neither a torch nn.Module nor a keras.Model of zoo")


def model_tensors(model: Any) -> dict[str, np.ndarray]:
    """A zoo twin's weights as canonical float32/int64 numpy arrays, each a copy of its own."""
    if framework_of(model) == "keras":
        with ThreadPoolExecutor(IO_THREADS, thread_name_prefix="zoo-copy") as pool:
            return keras_to_tensors(model, _weight_table(model), pool=pool)
    return _torch_arrays(model, snapshot=True)


def tensors_to_save(model: Any) -> dict[str, np.ndarray] | TensorStream:
    """A zoo twin's weights as canonical tensors for a save to write at once, copied nowhere
    that the writer need not copy: views of the weights' memory where the layout and dtype
    are already canonical. A Keras twin's come as a stream, read port by port while the
    writer writes (``zoo.checkpoint.keras_variables.keras_tensor_stream``)."""
    if framework_of(model) == "keras":
        return keras_tensor_stream(model, _weight_table(model))
    return _torch_arrays(model, snapshot=False)


def _weight_table(model: Any):
    return registry.get_family(model.zoo_config.architecture).weight_table(model.zoo_config)


def _torch_arrays(model: Any, snapshot: bool) -> dict[str, np.ndarray]:
    specs = tensor_specs(_weight_table(model))
    tensors = {}
    state = model.state_dict()
    if any(".parametrizations." in key for key in state):  # weights held as integers
        from zoo.nn.torch.quantized import canonical_state

        state = canonical_state(model, state)
    for name, value in state.items():
        tensor = value.detach().to("cpu")
        if tensor.is_floating_point():
            tensor = tensor.float()
        array = tensor.numpy()
        dtype = specs[name].dtype if name in specs else array.dtype
        shared = value.device.type == "cpu" and tensor.data_ptr() == value.data_ptr()
        tensors[name] = array.astype(dtype, copy=snapshot and shared)
    return tensors


def load_tensors(model: Any, tensors: dict[str, np.ndarray]) -> None:
    """Put canonical tensors into a built twin of either framework. A Keras twin's kernels
    are transposed (the canonical layout is torch's) on a few threads side by side, as a
    checkpoint load does (into a built gpt2-medium twin: 0.51 GB/s one after the other, 0.74
    side by side; gpt2: 1.18 and 1.46 GB/s)."""
    config = model.zoo_config
    family = registry.get_family(config.architecture)
    # A bfloat16/float16 export goes back into float32 weights.
    tensors = as_float32(tensors)
    if framework_of(model) == "keras":
        table = family.weight_table(config)
        with ThreadPoolExecutor(IO_THREADS, thread_name_prefix="zoo-load") as pool:
            arrays = keras_arrays(table, tensors, pool)
        tensors_to_keras(model, table, tensors, arrays=arrays)
        return
    import torch

    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in tensors.items()}, strict=True)


def load_keras(checkpoint: Checkpoint):
    """The Keras twin without computing the initial weights the checkpoint overwrites (see
    ``zoo.nn.keras.skeleton``): seconds of TensorFlow random draws for a 100M-parameter model.

    Each tensor is read into aligned memory of its own, which its variable adopts with no
    copy where the layout is shared, and one cache-blocked transpose where it is not (into
    the memory of a tensor already transposed: ``zoo.checkpoint.keras_variables.Spares``). The file is read,
    checked finite and transposed on the other threads while this one builds the twin (the
    read is one system call: the build is Python and holds the GIL, which a read call per
    tensor would wait for each time). Where the build leaves a variable or a random draw that
    the checkpoint does not overwrite, the twin is built the ordinary way.
    """
    from zoo.nn.keras import skeleton as keras_skeleton  # zoo.nn.keras's __init__ imports Keras

    family, config = checkpoint.family, checkpoint.config
    table = family.weight_table(config)
    with ThreadPoolExecutor(IO_THREADS, thread_name_prefix="zoo-load") as pool:

        def read() -> tuple[dict[str, np.ndarray], list[str], list[Future]]:
            ready, ports = {}, _PortsAsRead(table, pool)
            if checkpoint.quantization is not None:  # the weights its integers stand for, all at once
                weights = checkpoint.float32_tensors()
                ports.arrived(list(weights), weights, ready)
            else:
                read_aligned(checkpoint.path, lambda names, read: ports.arrived(names, read, ready))
            bad = [name for name, tensor in ready.items() if name not in ports.readers and not finite(tensor)]
            return ready, bad, ports.all_submitted(ready)

        reading = pool.submit(read)
        model = None
        if keras_skeleton.available():
            with keras_skeleton.initialisers_skipped() as skipped:
                model = family.build_keras(config)
            filled = (keras_layer(keras_layer(model, p.layer), v) for p in table for v in p.variables)
            if not skipped.covered_by(filled):
                model = None
        tensors, bad, ports = reading.result()
        arrays = []
        for port in ports:
            port_values, port_bad = port.result()
            arrays += port_values
            bad += [name for name in port_bad if name not in bad]
        refuse_nonfinite(checkpoint.path, bad, len(tensors))
    if model is None:  # no skeleton, or one that would leave something unfilled
        model = family.build_keras(config)
    tensors_to_keras(model, table, tensors, handed_over=True, arrays=arrays)
    if checkpoint.quantization is not None:  # held as its integers from here on
        from zoo.nn.keras.quantized import hold_integers

        del tensors, arrays
        hold_integers(model, table, checkpoint.stored_integers(), checkpoint.quantization)
    return model


class _PortsAsRead:
    """Each port of a Keras load started as soon as the file's last tensor it reads is in
    (``read_aligned``'s chunks): the transposes run beside the rest of the read."""

    def __init__(self, table: Sequence[Port], pool: ThreadPoolExecutor) -> None:
        self.table, self.pool, self.spares = table, pool, Spares(table)
        self.waiting = [{s.name for s in port.tensors} for port in table]
        self.readers: dict[str, list[int]] = defaultdict(list)  # tensor -> the ports that read it
        for index, names in enumerate(self.waiting):
            for name in names:
                self.readers[name].append(index)
        self.started: list[Future | None] = [None] * len(table)

    def arrived(self, names: list[str], read: dict[str, np.ndarray], ready: dict[str, np.ndarray]) -> None:
        """``names`` are read: into ``ready`` as float32 (a bfloat16/float16 export's too), and
        every port that now has all of its tensors started."""
        ready.update(as_float32({name: read[name] for name in names}))
        for name in names:
            for index in self.readers.get(name, ()):
                self.waiting[index].discard(name)
                if not self.waiting[index]:
                    self.started[index] = self.pool.submit(_keras_port, self.table[index], ready, self.spares)

    def all_submitted(self, ready: dict[str, np.ndarray]) -> list[Future]:
        """Every port's future, in table order; one whose tensor the file lacks fails in it."""
        return [
            future or self.pool.submit(_keras_port, port, ready, self.spares)
            for future, port in zip(self.started, self.table, strict=True)
        ]


def _keras_port(port, tensors: dict[str, np.ndarray], spares) -> tuple[list[np.ndarray], list[str]]:
    """A load's work on one port: its tensors' finite check, then its Keras values (checked
    first: the values may go into memory that held those tensors)."""
    bad = [s.name for s in port.tensors if not finite(tensors[s.name])]
    return port_arrays(port, tensors, spares), bad


def load_torch(checkpoint: Checkpoint):
    """The torch twin without its random initialisation, which is ~0.9 s for 100M parameters
    and all overwritten: built on the meta device (no memory, no arithmetic), then handed the
    checkpoint's tensors. Those are copied out of safetensors' memory map, so the model owns
    its memory (a file changed under a map kills the process). A twin that computes state in
    ``__init__`` that the checkpoint does not hold would keep it on the meta device, and
    tied weights would come apart: such a twin is built the ordinary way."""
    import torch
    from safetensors.torch import load_file

    family, config = checkpoint.family, checkpoint.config
    if checkpoint.quantization is not None:  # the weights its integers stand for
        tensors = {name: torch.from_numpy(value) for name, value in checkpoint.float32_tensors().items()}
    else:
        tensors = {
            name: tensor.to(torch.float32 if tensor.is_floating_point() else tensor.dtype, copy=True)
            for name, tensor in load_file(checkpoint.path).items()
        }  # float32 weights, whatever the export dtype
        check_finite(checkpoint.path, tensors)
    importlib.import_module(family.torch_model.partition(":")[0])  # module-level tensors stay real
    with torch.device("meta"):
        model = family.build_torch(config)
    tied = len(list(model.named_parameters(remove_duplicate=False))) != len(list(model.parameters()))
    if not tied:
        model.load_state_dict(tensors, strict=True, assign=True)
    if tied or meta_tensors(model):
        model = family.build_torch(config)
        model.load_state_dict(tensors, strict=True)
    if checkpoint.quantization is not None:  # held as its integers from here on
        from zoo.nn.torch.quantized import hold_integers

        del tensors
        hold_integers(model, checkpoint.stored_integers(), checkpoint.quantization)
    return model


def meta_tensors(model) -> list[str]:
    """Where a torch model still holds meta tensors: parameters, buffers, plain attributes."""
    import torch

    found = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    for name, module in model.named_modules():
        for key, value in vars(module).items():
            values = value if isinstance(value, list | tuple) else [value]
            if any(isinstance(v, torch.Tensor) and v.is_meta for v in values):
                found.append(f"{name}.{key}")
    return found
