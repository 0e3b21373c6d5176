"""zoo's Keras recurrent cells and layers: torch's ``nn.RNN``/``nn.LSTM``/``nn.GRU`` steps.

Keras' own SimpleRNN and LSTM cells have one bias where torch has two, so zoo's cells keep
both in one (2, G*H) variable (why: :mod:`zoo.nn.recurrent_ports`). Keras' own GRU with
``reset_after=True`` is torch's GRU up to the gate order, which the weight port swaps, so
it is used as it is. Every variable starts from torch's U(+-1/sqrt(hidden)).

The layer functions return a layer over a whole sequence (``return_sequences``), the
:data:`zoo.nn.keras.recurrent.LayerFactory` product a recurrent family hands to the net.

The input product ``x W_ih^T + b_ih`` does not depend on the state, so
:class:`ProjectedRNN` computes it for every step in one matrix product before the time
loop, as torch's fused kernels do; a cell's step is then only the recurrent product and
the gates. Where the inputs are as wide as the state (the LSTM language models), that
product was half of each step's matrix work.
"""

from __future__ import annotations

import keras
from keras import layers, ops

from zoo.nn.keras.init import torch_recurrent_init
from zoo.nn.keras.linear import add_bias


def input_product(cell: layers.Layer, sequences):
    """``x W_ih^T + b_ih`` for every step of (N, T, I) ``sequences`` at once: (N, T, G*H).

    Computed in the cell's compute dtype (its own step, called through ``__call__``, gets
    Keras' autocasting; this product runs outside it), over the (N*T, I) rows as one
    matrix product.
    """
    dtype = cell.compute_dtype
    batch, steps = ops.shape(sequences)[0], ops.shape(sequences)[1]
    rows = ops.reshape(ops.cast(sequences, dtype), (-1, sequences.shape[-1]))
    projected = add_bias(ops.matmul(rows, ops.cast(cell.kernel, dtype)), cell.bias[0])
    return ops.reshape(projected, (batch, steps, projected.shape[-1]))


@keras.saving.register_keras_serializable(package="zoo")
class ProjectedRNN(layers.RNN):
    """``keras.layers.RNN`` over a cell with a ``project`` method: the input product runs
    once over the whole sequence before Keras' time loop, which then steps the cell on
    the projected inputs. Masking, ``go_backwards`` and ``Bidirectional`` work as in the
    base layer: the projection keeps the time axis and touches no state."""

    def call(self, sequences, initial_state=None, mask=None, training=False):
        return super().call(self.cell.project(sequences), initial_state, mask, training)


@keras.saving.register_keras_serializable(package="zoo")
class TorchRNNCell(layers.Layer):
    """``torch.nn.RNN``'s step: ``h = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``.

    ``bias`` is (2, units): row 0 is torch's ``bias_ih``, row 1 ``bias_hh``. Registered as
    serializable because ``Bidirectional`` clones its layer from the config. A step takes
    its input already projected (:meth:`project`, run by :class:`ProjectedRNN`).

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

    def project(self, sequences):
        return input_product(self, sequences)

    def call(self, projected, states, training=False):
        previous = states[0] if isinstance(states, (list, tuple)) else states
        h = self.activation(projected + add_bias(ops.matmul(previous, self.recurrent_kernel), self.bias[1]))
        return h, [h]

    def get_config(self):
        return {**super().get_config(), "units": self.units, "activation": self.activation_name}


@keras.saving.register_keras_serializable(package="zoo")
class TorchLSTMCell(layers.Layer):
    """``torch.nn.LSTM``'s step, gates (input, forget, cell, output) as in Keras' LSTM.

    ``bias`` is (2, 4 * units): row 0 is torch's ``bias_ih``, row 1 ``bias_hh``.
    Registered as serializable because ``Bidirectional`` clones its layer from the config.
    A step takes its input already projected (:meth:`project`, run by :class:`ProjectedRNN`).

    Not a low-precision product layer: torch's autocast runs ``nn.LSTM`` in oneDNN's
    bfloat16 kernel, whose gradients measured closer to this cell in float32 than to the
    cell in bfloat16 (docs/precision.md).
    """

    def __init__(self, units: int, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = [units, units]
        self.output_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight(
            shape=(input_shape[-1], 4 * self.units),
            initializer=torch_recurrent_init(self.units),
            name="kernel",
        )
        self.recurrent_kernel = self.add_weight(
            shape=(self.units, 4 * self.units),
            initializer=torch_recurrent_init(self.units),
            name="recurrent_kernel",
        )
        self.bias = self.add_weight(
            shape=(2, 4 * self.units), initializer=torch_recurrent_init(self.units), name="bias"
        )

    def project(self, sequences):
        return input_product(self, sequences)

    def call(self, projected, states, training=False):
        h, c = states
        z = projected + add_bias(ops.matmul(h, self.recurrent_kernel), self.bias[1])
        i, f, g, o = ops.split(z, 4, axis=-1)
        c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
        h = ops.sigmoid(o) * ops.tanh(c)
        return h, [h, c]

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def simple_rnn_layer(units: int, activation: str = "tanh") -> layers.Layer:
    """``nn.RNN(nonlinearity=activation)`` over a whole sequence."""
    return ProjectedRNN(TorchRNNCell(units, activation), return_sequences=True)


def lstm_layer(units: int) -> layers.Layer:
    """``nn.LSTM`` over a whole sequence."""
    return ProjectedRNN(TorchLSTMCell(units), return_sequences=True)


def gru_layer(units: int) -> layers.Layer:
    """``nn.GRU`` over a whole sequence: Keras' GRU with the reset gate after the recurrent
    matmul (``reset_after=True``), as torch's, and torch's initialisation. Keras' own layer
    keeps its input product inside the time loop on a CPU, but runs cuDNN's fused GRU on a
    GPU, which a zoo cell would lose."""
    return layers.GRU(
        units,
        reset_after=True,
        return_sequences=True,
        kernel_initializer=torch_recurrent_init(units),
        recurrent_initializer=torch_recurrent_init(units),
        bias_initializer=torch_recurrent_init(units),
    )
