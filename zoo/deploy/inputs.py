"""The named inputs of an exported model, and the batches every export is checked on.

An export has no Python left to tell a caller what to pass, so its inputs are named and
their layouts fixed here, once for every family, from the family's ``InputSpec`` and its
config (no family is named):

- ``images``: float32, ``(batch, C, H, W)`` from the torch twin, ``(batch, H, W, C)`` from
  the Keras twin; only the batch axis is dynamic (the image size is the config's).
- ``features``: float32 ``(batch, steps, F)`` for a sequence classifier that reads features;
  ``ids``: int64 ``(batch, steps)`` token ids otherwise. Both axes are dynamic; ``steps`` is
  at most the config's ``context_length()`` where it has one.
- ``padding_mask``: bool ``(batch, steps)``, True marks padding at the end of a row, where the
  family declares ``InputSpec(padding_mask=True)``. Always an input of the export: pass all
  False for a batch without padding.
- ``token_type_ids``: int64 ``(batch, steps)``, segment ids below the config's
  ``type_vocab_size``, where the config has one (BERT's sentence A / sentence B).

The check batches vary both dynamic axes (an exporter that freezes an axis to the example's
size is a known failure of both torch's and TensorFlow's exporters) and pad every row but
one, so a mask that an export ignores shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from zoo.family import ArchitectureConfig, Family

BATCH, STEPS = "batch", "steps"
# The example an exporter traces, and the shapes every export is run at afterwards: two batch
# sizes and two sequence lengths, each different from the traced ones (capped by the context).
TRACE = (2, 7)
CHECKS = ((1, 5), (3, 11), (4, 5))


@dataclass(frozen=True)
class InputPort:
    """One named input: dtype and axes (ints are fixed sizes, strings the dynamic axes)."""

    name: str
    dtype: str
    torch_axes: tuple[int | str, ...]
    keras_axes: tuple[int | str, ...]

    def axes(self, framework: str) -> tuple[int | str, ...]:
        return self.torch_axes if framework == "lightning" else self.keras_axes

    def describe(self, framework: str) -> str:
        return f"{self.name}: {self.dtype} ({', '.join(map(str, self.axes(framework)))})"


def input_ports(family: Family, config: ArchitectureConfig) -> list[InputPort]:
    """The export's inputs, in the order the exported function takes them."""
    sample = config.example_input(1)
    if family.input_kind == "image":
        c, h, w = sample.shape[1:]
        return [InputPort("images", "float32", (BATCH, c, h, w), (BATCH, h, w, c))]
    sequence = (BATCH, STEPS)
    if sample.ndim == 3:  # (N, T, F) features
        features = (*sequence, sample.shape[-1])
        ports = [InputPort("features", "float32", features, features)]
    else:
        ports = [InputPort("ids", "int64", sequence, sequence)]
    if family.inputs.padding_mask:
        ports.append(InputPort("padding_mask", "bool", sequence, sequence))
    if getattr(config, "type_vocab_size", None):
        ports.append(InputPort("token_type_ids", "int64", sequence, sequence))
    return ports


def has_steps(ports: list[InputPort]) -> bool:
    return STEPS in ports[0].torch_axes


def shapes(config: ArchitectureConfig, ports: list[InputPort]) -> tuple[list[tuple[int, int]], tuple]:
    """(the (batch, steps) pairs checked, the traced pair), steps capped by the context.

    A context too short for two lengths cannot show a frozen steps axis; it gets what it holds."""
    limit = config.context_length() or max(steps for _, steps in (*CHECKS, TRACE))
    if not has_steps(ports):
        return [(batch, 0) for batch, _ in CHECKS], (TRACE[0], 0)
    checks = [(batch, min(steps, limit)) for batch, steps in CHECKS]
    return checks, (TRACE[0], min(TRACE[1], limit))


def batch(
    config: ArchitectureConfig, ports: list[InputPort], size: int, steps: int, seed: int
) -> dict[str, np.ndarray]:
    """One batch in the canonical (torch) layout, by input name.

    Rows are right-padded by different amounts (row i by 1 + i * steps // 3, modulo the
    length), so most rows have padding, one may have none, and every row keeps a real step."""
    rng = np.random.default_rng(seed)
    found: dict[str, np.ndarray] = {}
    for port in ports:
        if port.name == "images":
            found[port.name] = config.example_input(size, seed)
        elif port.name == "features":
            found[port.name] = rng.normal(size=(size, steps, port.torch_axes[-1])).astype(np.float32)
        elif port.name == "ids":
            found[port.name] = rng.integers(0, config.vocab_size, size=(size, steps), dtype=np.int64)
        elif port.name == "padding_mask":
            pads = [(1 + i * max(1, steps // 3)) % steps if steps > 1 else 0 for i in range(size)]
            found[port.name] = np.arange(steps)[None, :] >= (steps - np.array(pads))[:, None]
        elif port.name == "token_type_ids":  # sentence A, then sentence B from the middle on
            types = (np.arange(steps) >= steps // 2).astype(np.int64) % config.type_vocab_size
            found[port.name] = np.broadcast_to(types, (size, steps)).copy()
        else:
            raise AssertionError(f"no batch for the input {port.name!r}")
    return found


def model_kwargs(ports: list[InputPort], values: list[Any]) -> tuple[Any, dict[str, Any]]:
    """A twin's call arguments from the export's inputs: the first positional, the rest by name."""
    return values[0], {port.name: value for port, value in zip(ports[1:], values[1:], strict=True)}
