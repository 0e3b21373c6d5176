"""Weight ports of recurrent layers: torch ``nn.RNN/LSTM/GRU`` <-> zoo's Keras recurrent cells.

Each torch recurrent layer has four tensors per direction, ``weight_ih_l0`` (G*H, I),
``weight_hh_l0`` (G*H, H), ``bias_ih_l0`` and ``bias_hh_l0`` (G*H,), with G gates (1 for
an Elman RNN, 4 for an LSTM, 3 for a GRU) and ``_reverse`` names for the backward
direction. The Keras cell holds ``kernel`` (I, G*H) and ``recurrent_kernel`` (H, G*H),
the transposes, and ``bias`` of shape (2, G*H): row 0 is ``bias_ih``, row 1 ``bias_hh``.

The two biases are kept apart, not folded into one. Keras' own ``SimpleRNN`` and
``LSTM`` have a single bias, and ``b_ih + b_hh`` in it gives the same outputs, but
going back the split is lost (the sum would land in ``bias_ih`` and ``bias_hh`` would be
zero), the Keras twin would have G*H fewer parameters per layer and direction, and the
twins would no longer train alike: torch steps both biases with the same gradient, so
their sum moves twice as far as a single Keras bias would. zoo's Keras cells
(:mod:`zoo.nn.keras.recurrent_cells`) therefore carry both biases in one (2, G*H)
variable, the layout Keras' own GRU uses with ``reset_after=True``.

Gate order: LSTM gates are stacked alike in both frameworks (input, forget, cell,
output). GRU gates are not: torch stacks (reset, update, new), Keras (update, reset,
new), so the first two H-row blocks of every GRU tensor swap (without the swap outputs
differ by ~0.5). The mapping is then exact both ways: transposes, plus that swap.

Pure numpy: importing this module imports neither framework.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from zoo.checkpoint.tables import Arrays, Port, TensorSpec, dense, embedding
from zoo.nn.recurrent_config import RecurrentConfig

# (tensor name prefix, Keras cell path from the layer, input size, hidden size, "" or "_reverse")
PortFactory = Callable[[str, str, int, int, str], Port]
GateOrder = Callable[[np.ndarray], np.ndarray]


def _same_order(array: np.ndarray) -> np.ndarray:
    return array


def swap_reset_update(array: np.ndarray) -> np.ndarray:
    """torch's GRU (r, z, n) <-> Keras' (z, r, h) along the first axis; its own inverse."""
    r, z, n = np.split(array, 3, axis=0)
    return np.concatenate([z, r, n], axis=0)


def recurrent(
    name: str,
    cell: str,
    input_size: int,
    hidden_size: int,
    suffix: str,
    *,
    gates: int,
    reorder: GateOrder = _same_order,
) -> Port:
    """One direction of a single-layer torch recurrent module <-> one zoo Keras cell.

    ``reorder`` permutes the gate blocks along the first axis; it must be its own
    inverse, so the same function converts either way.
    """
    rows = gates * hidden_size
    tensors = (
        TensorSpec(f"{name}.weight_ih_l0{suffix}", (rows, input_size)),
        TensorSpec(f"{name}.weight_hh_l0{suffix}", (rows, hidden_size)),
        TensorSpec(f"{name}.bias_ih_l0{suffix}", (rows,)),
        TensorSpec(f"{name}.bias_hh_l0{suffix}", (rows,)),
    )
    variables = (f"{cell}.kernel", f"{cell}.recurrent_kernel", f"{cell}.bias")

    def to_keras(w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray, b_hh: np.ndarray) -> Arrays:
        return reorder(w_ih).T, reorder(w_hh).T, np.stack([reorder(b_ih), reorder(b_hh)])

    def to_torch(kernel: np.ndarray, recurrent_kernel: np.ndarray, bias: np.ndarray) -> Arrays:
        return reorder(kernel.T), reorder(recurrent_kernel.T), reorder(bias[0]), reorder(bias[1])

    return Port(tensors, name, variables, to_keras, to_torch)


def simple_rnn(name: str, cell: str, input_size: int, hidden_size: int, suffix: str = "") -> Port:
    """``nn.RNN`` (one layer, one direction) <-> zoo's Keras ``TorchRNNCell``."""
    return recurrent(name, cell, input_size, hidden_size, suffix, gates=1)


def lstm(name: str, cell: str, input_size: int, hidden_size: int, suffix: str = "") -> Port:
    """``nn.LSTM`` (one layer, one direction) <-> zoo's Keras ``TorchLSTMCell``."""
    return recurrent(name, cell, input_size, hidden_size, suffix, gates=4)


def gru(name: str, cell: str, input_size: int, hidden_size: int, suffix: str = "") -> Port:
    """``nn.GRU`` (one layer, one direction) <-> ``keras.layers.GRU(reset_after=True)``'s cell."""
    return recurrent(name, cell, input_size, hidden_size, suffix, gates=3, reorder=swap_reset_update)


def directions(bidirectional: bool) -> list[tuple[str, str]]:
    """(Keras cell path from the layer, torch name suffix) of each direction, in torch order."""
    if not bidirectional:
        return [("cell", "")]
    return [("forward_layer.cell", ""), ("backward_layer.cell", "_reverse")]


def tied_head(name: str, outputs: int) -> Port:
    """A head whose weight is the embedding: only its bias is its own tensor."""
    return Port((TensorSpec(f"{name}.bias", (outputs,)),), name, ("bias",), _same_order_all, _same_order_all)


def _same_order_all(*arrays: np.ndarray) -> Arrays:
    return tuple(arrays)


def sequence_table(cfg: RecurrentConfig, port: PortFactory) -> list[Port]:
    """The weight table of :class:`zoo.nn.torch.recurrent.RecurrentNet` and its Keras twin:
    embedding (token inputs), one ``port`` per recurrent layer and direction, then the head."""
    ports = []
    if cfg.reads_tokens:
        ports.append(embedding("embedding", cfg.vocab_size, cfg.embedding_dim))
    for index in range(cfg.num_layers):
        for cell, suffix in directions(cfg.bidirectional):
            ports.append(
                port(f"recurrent.{index}", cell, cfg.layer_input_size(index), cfg.hidden_size, suffix)
            )
    if cfg.tie_embeddings:
        ports.append(tied_head("head", cfg.output_size))
    else:
        ports.append(dense("head", cfg.features, cfg.output_size))
    return ports
