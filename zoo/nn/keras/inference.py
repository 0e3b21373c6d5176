"""The Keras twin's forward for inference, traced once (issue 41): what ``zoo predict`` runs, and
what :func:`forward` gives a model from ``zoo.load``.

Called eagerly, a Keras twin dispatches its ops one by one from Python (about 900 for a
convnext_tiny: half the speed of the torch twin at batch 1). Here it runs as one
``tf.function`` with a fixed input signature, AutoGraph off (as the compiled generation of
``zoo.nn.keras.decoder``): the batch dimension is ``None``, so a short last batch runs the same
graph, and for token ids the length is open too. One trace per model and per set of inputs given
(ids alone, ids with a padding mask...), however many batches follow; ``traces`` counts them.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from zoo.nn.keras.decoder import in_zoo_words
from zoo.nn.keras.kept import kept_on_model

EXTRAS = ("padding_mask", "token_type_ids")  # the keyword inputs a twin's call may take


class TracedForward:
    """One model's traced inference calls, one per input signature (``traces``: how many times
    any of them was traced; a trace per batch would show here)."""

    def __init__(self, model, key: tuple):
        self.model, self.key = model, key
        self.traces = 0
        self._functions: dict[tuple, tf.types.experimental.PolymorphicFunction] = {}

    def __call__(self, x, padding_mask=None, token_type_ids=None) -> np.ndarray:
        """The model's outputs (``training=False``) for ``x`` in its own (Keras) layout, as float32
        numpy; the keyword inputs as the twin's ``call`` takes them."""
        x = np.asarray(x)
        values = zip(EXTRAS, (padding_mask, token_type_ids), strict=True)
        given = {k: np.asarray(v) for k, v in values if v is not None}
        # token ids: every dimension open; anything else (pixels, features): only the batch
        sample = (None,) * (x.ndim - 1) if x.dtype.kind in "iu" else x.shape[1:]
        key = (x.dtype.str, sample, tuple((k, v.dtype.str) for k, v in given.items()))
        function = self._functions.get(key)
        if function is None:
            function = self._functions[key] = self._traced(x.dtype, sample, given)
        out = in_zoo_words(function, x, *given.values())
        return np.asarray(out, dtype=np.float32)

    def _traced(self, dtype, sample: tuple, given: dict[str, np.ndarray]):
        names = tuple(given)

        def forward(x, *extras):
            self.traces += 1  # Python: runs when traced, not when the graph runs
            return self.model(x, **dict(zip(names, extras, strict=True)), training=False)

        signature = [tf.TensorSpec((None, *sample), tf.as_dtype(dtype))]
        signature += [tf.TensorSpec((None,) * v.ndim, tf.as_dtype(v.dtype)) for v in given.values()]
        return tf.function(forward, autograph=False, input_signature=signature)


def traced_forward(model) -> TracedForward:
    """``model``'s traced inference forward, made on first use and kept while its variables are
    the same ones (a LoRA adapter attached changes the computation: made again)."""
    return kept_on_model(model, "_zoo_forward", TracedForward)


def forward(model, x, padding_mask=None, token_type_ids=None) -> np.ndarray:
    """``model(x, training=False)`` of a Keras twin, traced once for every batch size (and every
    length of token ids): the same outputs as the eager call within float32 rounding, as numpy.
    ``x`` is in the twin's layout (channels last for images)."""
    return traced_forward(model)(x, padding_mask, token_type_ids)
