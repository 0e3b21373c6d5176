"""What a Keras twin keeps of its own compiled functions: made on first use, kept on the model
while its variables are the same ones (a LoRA adapter attached changes the computation, and a
function traced before it would run without it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

Kept = TypeVar("Kept")


def kept_on_model(model: Any, attribute: str, make: Callable[[Any, tuple], Kept]) -> Kept:
    """``make(model, key)``, kept as ``model.<attribute>`` (not a tracked Keras attribute) and
    made again when the model's variables (``key``: their ids) are no longer the ones it was
    made for. What it makes has a ``key`` attribute."""
    key = tuple(id(variable) for variable in model.weights)
    held = model.__dict__.get(attribute)
    if held is None or held.key != key:
        held = make(model, key)
        object.__setattr__(model, attribute, held)
    return held
