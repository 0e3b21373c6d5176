"""Foreign weight layouts (torchvision, timm, transformers): the contract a family fills.

A family lists the layouts it reads and writes in ``Family.formats``. Each is two pure
numpy functions, named by ``"module:callable"`` so that nothing is imported before it is
used:

- ``to_zoo(tensors, meta) -> (config_fields, tensors)``: a foreign state dict (and the
  ``config.json`` beside it, or ``{}``) into the family's config fields and its canonical
  tensors. Weights that are not this layout raise :class:`ForeignLayoutError` naming the
  keys that could not be placed, so ``zoo import`` can say why nothing fits.
- ``from_zoo(config, tensors) -> (tensors, meta)``: the reverse, with the ``config.json``
  the foreign library wants beside the weights (or ``None``).

Reading files and writing zoo checkpoints is :mod:`zoo.interchange`'s; a format only maps.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

Tensors = dict[str, np.ndarray]


class ForeignLayoutError(ValueError):
    """Weights that are not the layout a format reads: ``unplaced`` are the foreign keys it
    could not place (or, with ``missing``, the keys it needed and did not find)."""

    def __init__(self, message: str, unplaced: Iterable[str] = (), missing: Iterable[str] = ()):
        super().__init__(message)
        self.unplaced = list(unplaced)
        self.missing = list(missing)


@dataclass(frozen=True)
class ForeignFormat:
    name: str  # what users pass to --format: "torchvision", "timm", "hf"
    description: str
    to_zoo: str  # "module:callable(tensors, meta) -> (config_fields, tensors)"
    from_zoo: str  # "module:callable(config, tensors) -> (tensors, meta | None)"

    def read(self, tensors: Tensors, meta: Mapping[str, Any]) -> tuple[dict[str, Any], Tensors]:
        return resolve(self.to_zoo)(tensors, meta)

    def write(self, config: Any, tensors: Tensors) -> tuple[Tensors, dict[str, Any] | None]:
        return resolve(self.from_zoo)(config, tensors)


def timm_variant(meta: Mapping[str, Any], variants: Iterable[str], reads: str) -> str:
    """The timm factory a ``config.json`` names, without its pretrained tag ("resnet50.a1_in1k" ->
    "resnet50"), if it is one of ``variants``; refused otherwise, saying what the family ``reads``."""
    architecture = str(meta.get("architecture", ""))
    name = architecture.split(".")[0]
    if name not in variants:
        raise ForeignLayoutError(
            f"config.json names the timm architecture {architecture!r}; {reads}: {', '.join(variants)}"
        )
    return name


def renamed(
    tensors: Mapping[str, np.ndarray],
    names: Mapping[str, str],
    *,
    ignore: Callable[[str], bool] = lambda key: False,
    what: str = "weights",
) -> Tensors:
    """``tensors`` renamed by ``names`` (source key -> target key), checking that every
    source key is placed (or ignored) and every named key is present."""
    unplaced = [key for key in tensors if key not in names and not ignore(key)]
    missing = [key for key in names if key not in tensors]
    if unplaced or missing:
        raise ForeignLayoutError(
            f"these {what} do not fit: "
            + "; ".join(
                part
                for part in (
                    f"unplaced {_some(unplaced)}" if unplaced else "",
                    f"missing {_some(missing)}" if missing else "",
                )
                if part
            ),
            unplaced,
            missing,
        )
    return {target: tensors[source] for source, target in names.items()}


def _some(keys: list[str], limit: int = 5) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def resolve(target: str) -> Callable[..., Any]:
    """The callable a ``"module:attribute"`` target names, imported now (a family's pieces
    and formats are named this way so that listing them imports no framework)."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)
