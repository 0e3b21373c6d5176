"""What every decoder-only language-model twin shares, the Keras side of ``zoo.nn.torch.decoder``.

A family's decoder gives ``_run(ids, padding_mask, cache, cached, training)`` and
``forward_head(h)``; this base gives ``call``, ``forward_features``, ``decode`` (eager: each
call grows a :class:`DecodeCache`) and ``set_grad_checkpointing``, as the torch twin's base
does, and compiled generation: :meth:`CausalDecoder.prefill` reads the prompt in one traced
call into a :class:`StaticCache` of one shape to the last token, and
:meth:`CausalDecoder.decode_step` writes one token a call into it, traced once per model
(fixed input signature, the slot passed as a tensor), however many tokens and prompts follow.
``_run`` takes a :class:`StaticCache` for that step: one token written at ``cache.length``.
Greedy decoding goes further, as keras-hub's ``generate`` does: :meth:`CausalDecoder.greedy`
runs the prefill and every step inside one traced ``tf.while_loop``, so no token goes back
through Python.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from zoo.nn.cache import DecodeCache, StaticCache
from zoo.nn.errors import InputError, input_error, token_ids_message
from zoo.nn.keras.kept import kept_on_model


class CausalDecoder(keras.Model):
    """(N, T) int token ids -> (N, T, vocab_size) logits, or the final hidden states for task
    "features"; ``padding_mask`` and ``decode`` as in the torch twin."""

    grad_checkpointing: bool = False
    model_name = "this model"
    compiled_generation = True  # zoo.sample.generate uses prefill/decode_step (False: eager decode)

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

    def prefill(self, ids, padding_mask=None, max_length: int | None = None):
        """Read the prompts ``ids`` (N, T) (``padding_mask`` (N, T), True at padding) in one
        compiled call: the last position's logits (N, vocab_size) and a :class:`StaticCache` of
        ``max_length`` slots (T when unset) holding the prompt's keys and values, for
        :meth:`decode_step`. The same arithmetic as :meth:`decode` with no cache."""
        ids = np.asarray(ids, dtype=np.int64)
        padding = np.zeros(ids.shape, bool) if padding_mask is None else np.asarray(padding_mask, bool)
        steps = ids.shape[1]
        max_length = steps if max_length is None else max_length
        if max_length < steps:
            raise ValueError(f"max_length {max_length} is shorter than the prompt's {steps} tokens")
        prefill = self.compiled_generation_functions().prefill
        logits, cache = in_zoo_words(prefill, ids, padding, np.int32(max_length))
        return logits, cache._replace(length=steps)

    def decode_step(self, ids, cache: StaticCache):
        """Read one token per row, ``ids`` (N, 1), written into slot ``cache.length`` of a
        :class:`StaticCache` from :meth:`prefill`: the logits (N, vocab_size) and the cache one
        slot further. Compiled once per model: no new trace per token, prompt or length."""
        if cache.length >= cache.max_length:
            raise ValueError(f"the static cache's {cache.max_length} slots are all written")
        functions = self.__dict__.get("_zoo_generation") or self.compiled_generation_functions()
        at = cache._replace(length=np.int32(cache.length))  # a tensor in the graph: no trace per slot
        logits, written = functions.step(np.asarray(ids, dtype=np.int64), at)
        return logits, written._replace(length=cache.length + 1)

    def greedy(self, ids, padding_mask=None, length: int = 1, eos=()) -> np.ndarray:
        """The greedy continuation of ``ids`` (N, T) (``padding_mask`` as in :meth:`prefill`):
        (N, k) token ids, the most likely token each step (ties to the lowest id, as numpy's
        ``argmax``), k = ``length``, or fewer once every row has produced one of the ``eos``
        ids. Prefill and decode steps as :meth:`prefill` and :meth:`decode_step` compute them,
        all in one traced call: the tokens ``zoo.sample.generate`` writes step by step. XLA
        compiles it where the model's ``jit_compile`` is True (Keras resolves its "auto" to
        True on a GPU, False on a CPU; set it to choose)."""
        ids = np.asarray(ids, dtype=np.int64)
        padding = np.zeros(ids.shape, bool) if padding_mask is None else np.asarray(padding_mask, bool)
        self._check_greedy(ids, length)
        stops = np.asarray(sorted(eos), dtype=np.int64)
        functions = self.compiled_generation_functions()
        greedy = functions.greedy_xla if self.jit_compile else functions.greedy
        tokens, written = in_zoo_words(greedy, ids, padding, np.int32(length), stops)
        return np.asarray(tokens)[:, : int(written)]

    def _check_greedy(self, ids: np.ndarray, length: int) -> None:
        """The checks the model makes in a graph, made here: XLA drops a graph's assertions, and
        out of range a gather there reads a clamped row instead of failing."""
        vocab, context = self.zoo_config.vocab_size, self.zoo_config.context_length()
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise InputError(token_ids_message(vocab))
        if context and ids.shape[1] + length > context:
            raise ValueError(
                f"{ids.shape[1]} prompt + {length} new tokens do not fit the context of {context}: "
                "zoo.sample.generate goes on past it, re-reading the last window"
            )

    def compiled_generation_functions(self) -> CompiledGeneration:
        """This model's traced prefill and decode step, made on first use (and again if its
        variables changed since: a LoRA adapter attached, which changes the computation)."""
        return kept_on_model(self, "_zoo_generation", CompiledGeneration)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def _run(self, ids, padding_mask, cache: DecodeCache | StaticCache | None, cached: bool, training: bool):
        raise NotImplementedError

    def forward_head(self, h):
        raise NotImplementedError


class CompiledGeneration:
    """One decoder's traced generation functions, and how many times each was traced
    (``traces``: a trace per token would show here; ``tests/test_compiled_generation.py``)."""

    def __init__(self, model: CausalDecoder, key: tuple):
        self.model, self.key = model, key
        self.traces = {"prefill": 0, "step": 0, "greedy": 0, "greedy_xla": 0}
        # AutoGraph off: no Python control flow here depends on a tensor's value, and without
        # its conversion of every Keras call the two traces take 1.3 s instead of 2.7 s (5M Llama).
        self.prefill = tf.function(
            self._prefill,
            autograph=False,
            input_signature=(
                tf.TensorSpec((None, None), tf.int64),
                tf.TensorSpec((None, None), tf.bool),
                tf.TensorSpec((), tf.int32),
            ),
        )
        greedy_signature = (
            tf.TensorSpec((None, None), tf.int64),
            tf.TensorSpec((None, None), tf.bool),
            tf.TensorSpec((), tf.int32),
            tf.TensorSpec((None,), tf.int64),
        )
        self.greedy = tf.function(self._greedy, autograph=False, input_signature=greedy_signature)
        # XLA-compiled, for a model whose ``jit_compile`` is True (Keras' "auto": on a GPU, not on
        # a CPU), as keras-hub's generate: one compilation per batch, prompt and generation length.
        self.greedy_xla = tf.function(
            self._greedy_xla, autograph=False, input_signature=greedy_signature, jit_compile=True
        )
        self._step = None

    def _prefill(self, ids, padding, max_length):
        self.traces["prefill"] += 1  # Python: runs when traced, not when the graph runs
        return self._prefilled(ids, padding, max_length)

    def _prefilled(self, ids, padding, max_length):
        h, cache = self.model._run(ids, padding, None, cached=True, training=False)
        extra = max_length - tf.shape(ids)[1]
        layers = tuple(
            tuple(tf.pad(t, [[0, 0], [0, 0], [0, extra], [0, 0]]) for t in pair) for pair in cache.layers
        )
        pads = tf.reduce_sum(tf.cast(padding, tf.int32), axis=1)
        static = StaticCache(layers, tf.pad(padding, [[0, 0], [0, extra]]), pads, tf.shape(ids)[1])
        return self.model.forward_head(h[:, -1]), static

    def step(self, ids, cache: StaticCache):
        """The decode step, traced once for a static cache's dtypes, every size left open."""
        if self._step is None:

            def open_spec(tensor):
                return tf.TensorSpec((None,) * len(tensor.shape), tf.as_dtype(tensor.dtype))

            self._step = tf.function(
                self._decode_step,
                autograph=False,
                input_signature=(
                    tf.TensorSpec((None, 1), tf.int64),
                    StaticCache(
                        tuple((open_spec(k), open_spec(v)) for k, v in cache.layers),
                        tf.TensorSpec((None, None), tf.bool),
                        tf.TensorSpec((None,), tf.int32),
                        tf.TensorSpec((), tf.int32),
                    ),
                ),
            )
        return self._step(ids, cache)

    def _decode_step(self, ids, cache):
        self.traces["step"] += 1
        return self._decoded(ids, cache)

    def _decoded(self, ids, cache):
        h, cache = self.model._run(ids, None, cache, cached=True, training=False)
        return self.model.forward_head(h[:, -1]), cache

    def _greedy(self, ids, padding, length, eos):
        self.traces["greedy"] += 1
        return self._greedy_loop(ids, padding, length, eos)

    def _greedy_xla(self, ids, padding, length, eos):
        self.traces["greedy_xla"] += 1
        return self._greedy_loop(ids, padding, length, eos)

    def _greedy_loop(self, ids, padding, length, eos):
        """Prefill into ``T + length`` slots (the room ``zoo.sample`` gives the step-by-step
        path, so the sums are the same), then a ``tf.while_loop`` of decode steps until
        ``length`` tokens or every row has ended: the (N, length) tokens (zeros past the end)
        and how many were written. Shapes XLA can compile: the tokens go into a preallocated
        tensor, not a growing TensorArray."""
        logits, cache = self._prefilled(ids, padding, tf.shape(ids)[1] + length)
        rows = tf.range(tf.shape(ids)[0])

        def chosen(step, logits, ended, tokens):
            token = most_likely(logits)
            ended = tf.logical_or(ended, tf.reduce_any(tf.equal(token[:, None], eos[None, :]), axis=1))
            at = tf.stack([rows, tf.fill(tf.shape(rows), step)], axis=1)
            return token, ended, tf.tensor_scatter_nd_update(tokens, at, token)

        nothing = tf.zeros(tf.shape(rows), tf.bool)
        token, ended, tokens = chosen(0, logits, nothing, tf.zeros((tf.shape(ids)[0], length), tf.int64))

        def going(step, token, cache, ended, tokens):
            return tf.logical_and(step < length, tf.logical_not(tf.reduce_all(ended)))

        def one_more(step, token, cache, ended, tokens):
            logits, cache = self._decoded(token[:, None], cache)
            token, ended, tokens = chosen(step, logits, ended, tokens)
            return step + 1, token, cache, ended, tokens

        step, _, _, _, tokens = tf.while_loop(going, one_more, (tf.constant(1), token, cache, ended, tokens))
        return tokens, step


def most_likely(logits):
    """(N, V) logits -> (N,) int64: numpy's ``argmax`` (the lowest id among the largest, and the
    first NaN where a row has one), which ``tf.argmax`` does not promise on ties."""
    ids = tf.range(tf.shape(logits)[-1], dtype=tf.int64)[None]
    nan = tf.math.is_nan(logits)
    top = tf.where(
        tf.reduce_any(nan, axis=-1, keepdims=True), nan, logits >= tf.reduce_max(logits, -1, keepdims=True)
    )
    return tf.reduce_min(tf.where(top, ids, tf.int64.max), axis=-1)


def last_logits_function(model: keras.Model):
    """``model``'s logits at the last position, (N, T) int64 ids -> (N, vocab_size), traced once
    for every batch and length: what generation calls each token for a language model that
    re-reads its window (no key/value cache: the transformer and recurrent families). Made on
    first use and kept while the model's variables are the same ones."""
    key = tuple(id(variable) for variable in model.weights)
    held = model.__dict__.get("_zoo_last_logits")
    if held is None or held[0] != key:

        def last_logits(ids):
            return model(ids, training=False)[:, -1]

        traced = tf.function(
            last_logits, autograph=False, input_signature=(tf.TensorSpec((None, None), tf.int64),)
        )

        def call(ids):
            return in_zoo_words(traced, np.asarray(ids, dtype=np.int64))

        call.traced = traced  # its experimental_get_tracing_count(): one for every length
        held = (key, call)
        object.__setattr__(model, "_zoo_last_logits", held)  # not a tracked Keras attribute
    return held[1]


def in_zoo_words(function, *args):
    """``function(*args)``, a traced one, with a failed graph check (a token id outside the
    vocabulary, a sequence past the context) raised as the eager call raises it: zoo's
    :class:`InputError`, found again in TensorFlow's error text."""
    try:
        return function(*args)
    except tf.errors.InvalidArgumentError as error:
        found = input_error(error)
        if found is None:
            raise
        raise found from None
