"""``nn.RNN``/``nn.LSTM``/``nn.GRU`` written as a ``scan``, so ``torch.export`` keeps the steps dynamic.

torch 2.13's ``torch.export`` traces the fused recurrent kernels by unrolling them over the
steps of the traced example: the program then reads sequences of that one length only
(``Dim("steps")`` fails with "your code specialized it to be a constant"). A recurrence
written with ``torch._higher_order_ops.scan`` is one loop node in the graph whose trip
count is the input's length, so the axis stays symbolic. :class:`ScanRecurrent` computes
torch's recurrence step for step from the very parameters of the module it stands in for
(all layers, both directions, tanh/ReLU RNN, LSTM, GRU); :func:`exportable` swaps it in
for every recurrent module of a copy of a model, for export only: training keeps torch's
fused kernels, which are faster and which the Keras twin is measured against.

Padding: ``padding_mask`` (N, T), True at padding. A padded step leaves the state as it
was and outputs zeros, so the forward direction's state at the end is the one at each
row's last real step and the backward direction starts from zero at that step, which is
what a packed sequence gives (``pack_padded_sequence``), without packing: it needs the
lengths on the host, which an exported graph does not have. Where the padding is at the end
the real steps are computed exactly as unpadded, so the same mask serves a forward-only
layer that the training model runs unpacked.

The arithmetic is torch's: the input projection of every step at once, then per step the
recurrent matmul, each with its own bias, in torch's gate order (LSTM i, f, g, o; GRU r, z, n
with the reset gate applied after the recurrent matmul). The fused kernels add in another
order: outputs agree to a few float32 roundings (docs/deploy.md).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch._higher_order_ops.scan import scan
from torch.nn.utils.rnn import PackedSequence

# scan's step: (carry, this step's inputs) -> (next carry, this step's output)
State = tuple[torch.Tensor, ...]


class ScanRecurrent(nn.Module):
    """A stand-in for ``layer`` (an ``nn.RNN``/``nn.LSTM``/``nn.GRU``) sharing its parameters.

    ``forward(x, hx=None, padding_mask=None)`` returns what ``layer(x, hx)`` returns:
    ``(output, h_n)``, or ``(output, (h_n, c_n))`` for an LSTM. ``padding_mask`` is the
    packed-sequence equivalent (see the module docstring); the training model's own
    ``pack_padded_sequence`` is not traced.
    """

    def __init__(self, layer: nn.RNNBase):
        super().__init__()
        if getattr(layer, "proj_size", 0):
            raise ValueError("an LSTM with proj_size has no scan stand-in; export it without projections")
        self.layer = layer
        self.mode = layer.mode  # "RNN_TANH", "RNN_RELU", "LSTM" or "GRU"
        self.directions = 2 if layer.bidirectional else 1

    def forward(
        self,
        x: torch.Tensor,
        hx: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
        padding_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor]]:
        if isinstance(x, PackedSequence):
            raise TypeError(
                "a scan reads a padded batch and its padding_mask, not a packed sequence: "
                "pass the padded tensor and padding_mask=... (True at padding)"
            )
        layer = self.layer
        steps_first = x if not layer.batch_first else x.transpose(0, 1)  # (T, N, I)
        keep = None
        if padding_mask is not None:
            keep = (~padding_mask.to(torch.bool)).transpose(0, 1)[..., None]  # (T, N, 1)
        initial = self._initial_states(steps_first, hx)
        finals: list[State] = []
        for index in range(layer.num_layers):
            outputs = []
            for direction in range(self.directions):
                state = initial[index * self.directions + direction]
                final, out = self._direction(steps_first, keep, state, index, direction)
                finals.append(final)
                outputs.append(out)
            steps_first = torch.cat(outputs, dim=-1) if self.directions == 2 else outputs[0]
        output = steps_first.transpose(0, 1) if layer.batch_first else steps_first
        h_n = torch.stack([final[0] for final in finals])
        if self.mode == "LSTM":
            return output, (h_n, torch.stack([final[1] for final in finals]))
        return output, h_n

    def _initial_states(self, x: torch.Tensor, hx) -> list[State]:
        """One carry per layer and direction, in torch's ``h_0`` order: zeros unless given."""
        count = self.layer.num_layers * self.directions
        shape = (count, x.shape[1], self.layer.hidden_size)
        if hx is None:  # two tensors for an LSTM: scan refuses carries that alias each other
            hx = (x.new_zeros(shape), x.new_zeros(shape)) if self.mode == "LSTM" else x.new_zeros(shape)
        parts = hx if self.mode == "LSTM" else (hx,)
        return [tuple(part[k] for part in parts) for k in range(count)]

    def _direction(
        self, x: torch.Tensor, keep: torch.Tensor | None, state: State, index: int, direction: int
    ) -> tuple[State, torch.Tensor]:
        """One layer, one direction over (T, N, I): (final carry, outputs (T, N, H))."""
        suffix = f"l{index}" + ("_reverse" if direction else "")
        layer = self.layer
        w_hh = getattr(layer, f"weight_hh_{suffix}")
        b_hh = getattr(layer, f"bias_hh_{suffix}") if layer.bias else None
        b_ih = getattr(layer, f"bias_ih_{suffix}") if layer.bias else None
        projected = F.linear(x, getattr(layer, f"weight_ih_{suffix}"), b_ih)  # every step at once
        step = _STEPS[self.mode]
        steps_in = (projected,) if keep is None else (projected, keep)

        def combine(carry: State, inputs: tuple[torch.Tensor, ...]) -> tuple[State, torch.Tensor]:
            new = step(inputs[0], carry, w_hh, b_hh)
            if len(inputs) == 2:  # a padded step keeps the carry and outputs zeros
                real = inputs[1]
                new = tuple(torch.where(real, n, c) for n, c in zip(new, carry, strict=True))
                return new, torch.where(real, new[0], 0.0)
            return new, new[0].clone()  # scan refuses an output aliasing the carry

        final, out = scan(combine, tuple(state), steps_in, dim=0, reverse=bool(direction))
        return tuple(final), out


def _elman(activation):
    def step(gates_x: torch.Tensor, carry: State, w_hh: torch.Tensor, b_hh) -> State:
        return (activation(gates_x + F.linear(carry[0], w_hh, b_hh)),)

    return step


def _lstm(gates_x: torch.Tensor, carry: State, w_hh: torch.Tensor, b_hh) -> State:
    h, c = carry
    i, f, g, o = (gates_x + F.linear(h, w_hh, b_hh)).chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def _gru(gates_x: torch.Tensor, carry: State, w_hh: torch.Tensor, b_hh) -> State:
    (h,) = carry
    x_r, x_z, x_n = gates_x.chunk(3, dim=-1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, dim=-1)
    r = torch.sigmoid(x_r + h_r)
    z = torch.sigmoid(x_z + h_z)
    n = torch.tanh(x_n + r * h_n)
    return ((1 - z) * n + z * h,)


_STEPS = {"RNN_TANH": _elman(torch.tanh), "RNN_RELU": _elman(torch.relu), "LSTM": _lstm, "GRU": _gru}


def exportable(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose recurrent modules are :class:`ScanRecurrent` stand-ins (the
    same parameter values); ``model`` itself is untouched. A model without any is returned as is."""
    if isinstance(model, nn.RNNBase):
        return ScanRecurrent(copy.deepcopy(model))
    if not any(isinstance(module, nn.RNNBase) for module in model.modules()):
        return model
    model = copy.deepcopy(model)
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.RNNBase):
            parent, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, attribute, ScanRecurrent(module))
    return model
