"""Multi-head self-attention, the twin of ``zoo.nn.torch.attention`` step for step.

Not ``keras.layers.MultiHeadAttention``: on TensorFlow its per-head bias, added as
``x (N, T, heads, head_dim) + b (heads, head_dim)``, goes through ``keras.ops.add``,
which turns a bias that squeezes to one axis into ``tf.nn.bias_add`` and, when head_dim
is 1 and the sequence is as long as there are heads, adds it along the time axis
(docs/keras-bias-add-bug.md). Here the query/key/value projection is one fused
E -> 3E matmul with a 1-D bias on the last axis, which ``bias_add`` gets right, and the
heads are split by explicit reshapes.

Same arithmetic, same order as the torch twin: matrix products in the compute dtype
(bfloat16 under mixed precision), scaling, masking and softmax in float32 at least,
dropout on the probabilities.
"""

from __future__ import annotations

import math

import keras
from keras import layers, ops

from zoo.nn.keras.activations import softcap as capped
from zoo.nn.keras.linear import Dense, add_bias
from zoo.nn.keras.norm import RMSNorm
from zoo.nn.keras.rotary import apply_rotary


class SelfAttention(layers.Layer):
    """Self-attention over (N, T, E) with ``num_heads`` heads of E / num_heads features.

    Variables: ``in_proj_kernel`` (E, 3E), query, key and value side by side (torch's
    ``in_proj_weight`` transposed), ``in_proj_bias`` (3E,), and the ``out_proj`` Dense.
    Initialised from torch's distributions: Xavier-uniform projection, the output kernel
    U(+-1/sqrt(E)) (``nn.Linear``'s default), zero biases.
    """

    low_precision_products = True  # under mixed precision: products low, softmax float32

    in_proj_delta = None  # LoRA's q/k/v adapters (zoo.lora.keras_lora), a layer added to the fused output

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.rate = dropout
        bound = 1.0 / math.sqrt(embed_dim)
        self.out_proj = Dense(
            embed_dim,
            kernel_initializer=keras.initializers.RandomUniform(-bound, bound),
            bias_initializer="zeros",
        )
        self.dropout = layers.Dropout(dropout)  # on the attention probabilities

    def build(self, input_shape):
        e = self.embed_dim
        if input_shape[-1] is not None and input_shape[-1] != e:
            raise ValueError(f"SelfAttention({e}) got inputs with {input_shape[-1]} features")
        self.in_proj_kernel = self.add_weight(
            shape=(e, 3 * e), initializer="glorot_uniform", name="in_proj_kernel"
        )
        self.in_proj_bias = self.add_weight(shape=(3 * e,), initializer="zeros", name="in_proj_bias")
        self.out_proj.build((*input_shape[:-1], e))

    def call(self, x, blocked=None, training=False):
        """(N, T, E) -> (N, T, E). ``blocked``: True where a query may not attend to a key,
        broadcastable to (N, heads, T, T): (T, T) or (N, 1, T, T), see :func:`blocked_mask`."""
        return self.call_cached(x, blocked, training=training)[0]

    def call_cached(self, x, blocked=None, past=None, training=False, write=None):
        """Incremental decoding, as the torch twin's ``forward_cached``: this step's T queries
        attend over the ``past`` keys and values (each (N, heads, P, head_dim)) followed by this
        step's own. Returns the output (N, T, E) and the keys and values (N, heads, P + T,
        head_dim) to pass as ``past`` next time; ``blocked`` is broadcastable to
        (N, heads, T, P + T) (:func:`blocked_mask` with ``past=P``).

        With ``write`` (a static cache, :func:`static_step`), ``past`` keeps its shape (N, heads,
        max_length, head_dim): this step's one token is written into the slot ``write`` marks,
        and ``blocked`` (N, 1, 1, max_length) hides the slots not written yet."""
        steps = x.shape[1] if x.shape[1] is not None else ops.shape(x)[1]
        # A 1-D bias on the last axis (bias_add gets this one right), summed in float32.
        qkv = add_bias(ops.matmul(x, self.in_proj_kernel), self.in_proj_bias)
        if self.in_proj_delta is not None:  # LoRA's q/k/v adapters (zoo.lora.keras_lora)
            qkv = qkv + self.in_proj_delta(x, training=training)
        q, k, v = (self._heads(part, steps) for part in ops.split(qkv, 3, axis=-1))
        k, v = extended(past, k, v, write)
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))  # (N, heads, T, P + T)
        probs = attention_probabilities(scores, blocked, self.head_dim)
        out = ops.matmul(self.dropout(probs, training=training), v)
        out = ops.reshape(ops.transpose(out, (0, 2, 1, 3)), (-1, steps, self.embed_dim))
        return self.out_proj(out), (k, v)

    def _heads(self, x, steps):
        """(N, T, E) -> (N, heads, T, head_dim)."""
        return ops.transpose(ops.reshape(x, (-1, steps, self.num_heads, self.head_dim)), (0, 2, 1, 3))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "embed_dim": self.embed_dim,
            "num_heads": self.num_heads,
            "dropout": self.rate,
        }


def attention_probabilities(
    scores, blocked, head_dim: int, scale: float | None = None, softcap: float | None = None
):
    """Scaled, masked softmax in float32 at least (float64 stays float64), back in the scores' dtype;
    ``scale`` and ``softcap`` as the torch twin's."""
    dtype = "float64" if keras.backend.standardize_dtype(scores.dtype) == "float64" else "float32"
    # A Python float straight into the dtype: ops.cast would pass it through float32 first.
    factor = head_dim**-0.5 if scale is None else scale
    logits = ops.multiply(ops.cast(scores, dtype), ops.convert_to_tensor(factor, dtype=dtype))
    if softcap is not None:
        logits = capped(logits, softcap)
    if blocked is not None:
        logits = ops.where(blocked, ops.cast(float("-inf"), dtype), logits)
    return ops.cast(ops.softmax(logits, axis=-1), scores.dtype)


def blocked_mask(steps, padding_mask=None, causal: bool = False, past=0, window: int | None = None):
    """True where attention is blocked, as ``zoo.nn.torch.attention.blocked_mask``: later keys
    (``causal``), keys ``window`` or more places back (a causal sliding window) and padding keys
    (``padding_mask`` (N, P + T), True at padding) except a step's own; the queries are the
    ``steps`` positions after ``past`` cached ones.

    ``None`` when nothing is blocked, (T, P + T) without padding, (N, 1, T, P + T) with it.
    """
    if padding_mask is None and not causal:
        return None
    queries = ops.arange(past, past + steps)[:, None]
    keys = ops.arange(past + steps)[None, :]
    blocked = ops.greater(keys, queries) if causal else None  # key after query
    if causal and window is not None:
        blocked = ops.logical_or(blocked, ops.less_equal(keys, queries - window))
    if padding_mask is None:
        return blocked
    padding = ops.cast(padding_mask, "bool")[:, None, None, :]
    blocked = padding if blocked is None else ops.logical_or(padding, blocked)
    return ops.logical_and(blocked, ops.not_equal(keys, queries))


class GroupedQueryAttention(layers.Layer):
    """Grouped-query self-attention with rotary positions, as ``zoo.nn.torch.attention``'s
    :class:`GroupedQueryAttention` (transformers' ``LlamaAttention``): Dense ``q_proj``,
    ``k_proj``, ``v_proj`` and ``o_proj``, ``num_kv_heads`` key/value heads each read by
    ``num_heads / num_kv_heads`` query heads.

    Not a low-precision layer itself: its Dense projections are (they get the mixed policy),
    so its inputs stay float32 and the rotary tables reach it unrounded. The two attention
    products run in the projections' compute dtype, the rotation in float32 before them and
    the softmax in float32, as torch's autocast orders them. ``qk_norm_eps`` (Qwen3's) adds
    ``q_norm`` and ``k_norm``, RMSNorms over each head's features before the rotation; they read
    the projections' output as it is (no autocast), so a mixed twin rounds as torch's does;
    ``norm``, ``scale`` and ``softcap`` as the torch twin's (Gemma's).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        qkv_bias: bool = False,
        out_bias: bool = False,
        dropout: float = 0.0,
        kernel_initializer: keras.initializers.Initializer | str = "glorot_uniform",
        qk_norm_eps: float | None = None,
        norm: type[RMSNorm] = RMSNorm,
        scale: float | None = None,
        softcap: float | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
        self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim = (
            hidden_size, num_heads, num_kv_heads, head_dim,
        )  # fmt: skip
        self.rate = dropout

        def dense(units: int, bias: bool) -> Dense:
            initializer = keras.initializers.get(kernel_initializer)
            fresh = type(initializer).from_config(initializer.get_config())  # one draw per layer
            return Dense(units, use_bias=bias, kernel_initializer=fresh, bias_initializer="zeros")

        self.q_proj = dense(num_heads * head_dim, qkv_bias)
        self.k_proj = dense(num_kv_heads * head_dim, qkv_bias)
        self.v_proj = dense(num_kv_heads * head_dim, qkv_bias)
        self.o_proj = dense(hidden_size, out_bias)
        self.dropout = layers.Dropout(dropout)
        normed = qk_norm_eps is not None  # Qwen3's per-head query and key RMSNorms
        self.q_norm = norm(epsilon=qk_norm_eps, autocast=False) if normed else None
        self.k_norm = norm(epsilon=qk_norm_eps, autocast=False) if normed else None
        self.scale, self.softcap = scale, softcap

    def build(self, input_shape, cos_shape=None, sin_shape=None, blocked_shape=None):
        for projection in (self.q_proj, self.k_proj, self.v_proj):
            projection.build((*input_shape[:-1], self.hidden_size))
        self.o_proj.build((*input_shape[:-1], self.num_heads * self.head_dim))
        if self.q_norm is not None:
            self.q_norm.build((None, None, None, self.head_dim))
            self.k_norm.build((None, None, None, self.head_dim))

    def call(self, x, cos, sin, blocked=None, training=False):
        return self.call_cached(x, cos, sin, blocked, training=training)[0]

    def call_cached(self, x, cos, sin, blocked=None, past=None, training=False, write=None):
        """As the torch twin's ``forward_cached``: keys and values (N, num_kv_heads, P + T,
        head_dim) for the next call, keys already turned to their positions; with ``write``, a
        static cache as :meth:`SelfAttention.call_cached`'s."""
        steps = x.shape[1] if x.shape[1] is not None else ops.shape(x)[1]
        q = self._heads(self.q_proj(x), steps, self.num_heads)
        k = self._heads(self.k_proj(x), steps, self.num_kv_heads)
        if self.q_norm is not None:  # over each head's features, before the rotation
            q, k = self.q_norm(q), self.k_norm(k)
        v = self._heads(self.v_proj(x), steps, self.num_kv_heads)
        product = self.q_proj.compute_dtype
        q, k = (ops.cast(apply_rotary(t, cos, sin), product) for t in (q, k))
        k, v = extended(past, k, v, write)
        group = self.num_heads // self.num_kv_heads
        keys, values = ops.repeat(k, group, axis=1), ops.repeat(ops.cast(v, product), group, axis=1)
        scores = ops.matmul(q, ops.transpose(keys, (0, 1, 3, 2)))  # (N, heads, T, P + T)
        probs = attention_probabilities(scores, blocked, self.head_dim, self.scale, self.softcap)
        out = ops.matmul(self.dropout(probs, training=training), values)
        out = ops.reshape(ops.transpose(out, (0, 2, 1, 3)), (-1, steps, self.num_heads * self.head_dim))
        return self.o_proj(out), (k, v)

    def _heads(self, x, steps, heads: int):
        """(N, T, heads * head_dim) -> (N, heads, T, head_dim)."""
        return ops.transpose(ops.reshape(x, (-1, steps, heads, self.head_dim)), (0, 2, 1, 3))

    def compute_output_shape(self, input_shape, *args):
        return input_shape


def extended(past, k, v, write=None):
    """This step's keys and values (N, heads, T, head_dim) after the ``past`` ones: joined on
    (a cache that grows a step at a time), or, with ``write`` (True at one slot, broadcastable to
    the cache), written into that slot of a static cache, whose shape stays as it is."""
    if past is None:
        return k, v
    if write is not None:
        return ops.where(write, k, past[0]), ops.where(write, v, past[1])
    return ops.concatenate([past[0], k], axis=2), ops.concatenate([past[1], v], axis=2)


def static_step(padding, pads, length, window: int | None = None):
    """What one token written into slot ``length`` (a scalar tensor) of a static cache
    (``zoo.nn.cache.StaticCache``: ``padding`` (N, max_length) bool, ``pads`` (N,) each row's
    padding count) needs: its positions (N, 1), as :func:`padded_positions` counts them (the
    real tokens before it); the blocked keys (N, 1, 1, max_length), as :func:`blocked_mask`'s
    (the slots after it, those ``window`` or more back and the prompt's padding); and the slot
    to write, (1, 1, max_length, 1).
    """
    slots = ops.arange(ops.shape(padding)[1], dtype="int32")
    length = ops.cast(length, "int32")
    positions = (length - ops.cast(pads, "int32"))[:, None]
    here = ops.equal(slots, length)
    padded = ops.logical_and(ops.cast(padding, "bool"), ops.logical_not(here)[None])
    unwritten = ops.greater(slots, length)
    if window is not None:
        unwritten = ops.logical_or(unwritten, ops.less_equal(slots, length - window))
    blocked = ops.logical_or(unwritten[None], padded)[:, None, None, :]
    return positions, blocked, here[None, None, :, None]


def joined_padding(before, past, padding_mask, ids):
    """As ``zoo.nn.torch.attention.joined_padding``: the padding of the ``past`` positions read
    before (``before`` (N, P) or None) and of ``ids`` now, or None if none is padding."""
    if padding_mask is None and before is None:
        return None
    now = ops.zeros_like(ids, dtype="bool") if padding_mask is None else ops.cast(padding_mask, "bool")
    if not past:
        return now
    if before is None:
        before = ops.zeros((ops.shape(ids)[0], past), dtype="bool")
    return ops.concatenate([before, now], axis=1)


def padded_positions(padding, past, steps):
    """As ``zoo.nn.torch.attention.padded_positions``: (1, T) from ``past`` on, or per row with
    real tokens counting from 0 whatever padding comes before them."""
    if padding is None:
        return ops.arange(past, past + steps)[None]
    real = ops.cast(ops.logical_not(padding), "int32")
    return ops.maximum(ops.cumsum(real, axis=1) - 1, 0)[:, past:]
