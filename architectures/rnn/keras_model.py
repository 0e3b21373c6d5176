"""The recurrent families' Keras twin: the torch twin's structure and attribute names.

Inputs are batch-first as in torch. Each recurrent layer is a ``keras.layers.RNN`` (or
Keras' GRU), wrapped in ``Bidirectional`` when configured; its cell is reached as
``recurrent.{i}.cell`` or ``recurrent.{i}.forward_layer.cell`` / ``backward_layer.cell``.
Keras' own SimpleRNN and LSTM cells have one bias where torch has two, so zoo's cells
keep both (see ``architectures.rnn.weights``).
"""

from __future__ import annotations

from collections.abc import Callable

import keras
from keras import layers, ops

from architectures.rnn.config import LANGUAGE_MODELING_STEPS, RecurrentConfig, RNNConfig
from zoo.keras.layers import torch_recurrent_init
from zoo.keras.remat import checkpointed_call
from zoo.nn.keras import Dense, Embedding, add_bias

# () -> a Keras recurrent layer returning the whole sequence
LayerFactory = Callable[[], layers.Layer]


@keras.saving.register_keras_serializable(package="zoo")
class TorchRNNCell(layers.Layer):
    """``torch.nn.RNN``'s step: ``h = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``.

    ``bias`` is (2, units): row 0 is torch's ``bias_ih``, row 1 ``bias_hh``. Registered as
    serializable because ``Bidirectional`` clones its layer from the config.

    Under mixed precision the whole step runs in the low dtype, as torch's autocast runs
    ``nn.RNN`` (docs/precision.md).
    """

    low_precision_products = True

    def __init__(self, units: int, activation: str = "tanh", **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.activation = keras.activations.get(activation)
        self.activation_name = activation
        self.state_size = units
        self.output_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight(
            shape=(input_shape[-1], self.units), initializer=torch_recurrent_init(self.units), name="kernel"
        )
        self.recurrent_kernel = self.add_weight(
            shape=(self.units, self.units),
            initializer=torch_recurrent_init(self.units),
            name="recurrent_kernel",
        )
        self.bias = self.add_weight(
            shape=(2, self.units), initializer=torch_recurrent_init(self.units), name="bias"
        )

    def call(self, inputs, states, training=False):
        previous = states[0] if isinstance(states, (list, tuple)) else states
        h = add_bias(ops.matmul(inputs, self.kernel), self.bias[0])
        h = self.activation(h + add_bias(ops.matmul(previous, self.recurrent_kernel), self.bias[1]))
        return h, [h]

    def get_config(self):
        return {**super().get_config(), "units": self.units, "activation": self.activation_name}


class RecurrentNet(keras.Model):
    """Classification: (N, T, input_size) float -> (N, num_classes).
    Language modeling: (N, T) int token ids -> (N, T, vocab_size).

    With ``grad_checkpointing`` on, training keeps only each recurrent layer's input for
    backward and reruns the layer there, as the torch twin does.
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: RecurrentConfig, make_layer: LayerFactory, **kwargs):
        super().__init__(**kwargs)
        self.zoo_config = cfg
        # torch's defaults (nn.Embedding N(0, 1), nn.Linear U(+-1/sqrt(fan_in))), not Keras':
        # Keras' small uniform embedding starts a character model far slower. zoo's Embedding
        # refuses ids outside the vocabulary (Keras' own wraps a negative id round) as torch does.
        self.embedding = (
            Embedding(
                cfg.vocab_size,
                cfg.embedding_dim,
                embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0),
            )
            if cfg.language_model
            else None
        )
        self.recurrent = [
            layers.Bidirectional(make_layer(), merge_mode="concat") if cfg.bidirectional else make_layer()
            for _ in range(cfg.num_layers)
        ]
        self.dropout = layers.Dropout(cfg.dropout)
        features = cfg.hidden_size * (2 if cfg.bidirectional else 1)
        self.head = Dense(
            cfg.output_size,
            kernel_initializer=torch_recurrent_init(features),
            bias_initializer=torch_recurrent_init(features),
        )

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def forward_features(self, x, training=False):
        if self.embedding is not None:
            x = self.embedding(x)
        checkpointing = training and self.grad_checkpointing
        for index, layer in enumerate(self.recurrent):
            if index:
                x = self.dropout(x, training=training)
            x = checkpointed_call(layer, x) if checkpointing else layer(x, training=training)
        return x

    def forward_head(self, x, training=False):
        cfg = self.zoo_config
        if not cfg.language_model:
            x = pool(x, cfg)
        return self.head(self.dropout(x, training=training))

    def call(self, x, training=False):
        return self.forward_head(self.forward_features(x, training=training), training=training)


def pool(x, cfg: RecurrentConfig):
    """(N, T, D) -> (N, D), as the torch twin's ``pool``."""
    if cfg.pooling == "mean":
        return ops.mean(x, axis=1)
    if not cfg.bidirectional:
        return x[:, -1]
    h = cfg.hidden_size
    return ops.concatenate([x[:, -1, :h], x[:, 0, h:]], axis=-1)


def build_model(cfg: RecurrentConfig, make_layer: LayerFactory) -> RecurrentNet:
    """A built twin: called once on a dummy batch of the right dtype and shape."""
    model = RecurrentNet(cfg, make_layer)
    if cfg.language_model:
        model(ops.zeros((1, LANGUAGE_MODELING_STEPS), dtype="int32"))
    else:
        model(ops.zeros((1, *cfg.sample_shape())))
    return model


def build(cfg: RNNConfig) -> RecurrentNet:
    return build_model(
        cfg,
        lambda: layers.RNN(TorchRNNCell(cfg.hidden_size, cfg.nonlinearity), return_sequences=True),
    )
