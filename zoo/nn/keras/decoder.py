"""What every decoder-only language-model twin shares, the Keras side of ``zoo.nn.torch.decoder``.

A family's decoder gives ``_run(ids, padding_mask, cache, cached, training)`` and
``forward_head(h)``; this base gives ``call``, ``forward_features``, ``decode`` (eager only:
each call grows the cache) and ``set_grad_checkpointing``, as the torch twin's base does.
"""

from __future__ import annotations

import keras
from keras import ops

from zoo.nn.cache import DecodeCache
from zoo.nn.errors import InputError


class CausalDecoder(keras.Model):
    """(N, T) int token ids -> (N, T, vocab_size) logits, or the final hidden states for task
    "features"; ``padding_mask`` and ``decode`` as in the torch twin."""

    grad_checkpointing: bool = False
    model_name = "this model"

    def call(self, ids, padding_mask=None, token_type_ids=None, training=False):
        if token_type_ids is not None:
            raise InputError(f"{self.model_name} has no token types: pass token_type_ids=None")
        h = self.forward_features(ids, padding_mask, training=training)
        return h if self.zoo_config.active_task == "features" else self.forward_head(h)

    def forward_features(self, ids, padding_mask=None, training=False):
        """The final norm's hidden states (transformers' base model output)."""
        return self._run(ids, padding_mask, None, cached=False, training=training)[0]

    def decode(self, ids, cache: DecodeCache | None = None, padding_mask=None):
        """As the torch twin's: the last position's logits (N, vocab_size) and the extended cache."""
        h, cache = self._run(ops.convert_to_tensor(ids), padding_mask, cache, cached=True, training=False)
        return self.forward_head(h[:, -1]), cache

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def _run(self, ids, padding_mask, cache: DecodeCache | None, cached: bool, training: bool):
        raise NotImplementedError

    def forward_head(self, h):
        raise NotImplementedError
