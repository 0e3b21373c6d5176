"""The recurrent net every recurrent family's torch twin is: embedding, a stack of recurrent
layers the family supplies (``nn.RNN``/``nn.LSTM``/``nn.GRU``), pooling and a head; a plain
``nn.Module``, trained by zoo's Lightning task. Its Keras twin is :mod:`zoo.nn.keras.recurrent`.

Every recurrent layer is its own single-layer ``nn.RNN``/``nn.LSTM``/``nn.GRU`` in the
``recurrent`` list rather than one multi-layer module, so a layer is a block that can be
wrapped on its own (activation checkpointing per layer) and dropout between layers is
ours, identical in both twins. The list is called ``recurrent`` because ``keras.Model``
already owns ``layers`` and both twins must share attribute names.

Padded batches: a forward layer reads a right-padded batch as it is (its real steps never
see the pads that follow them); a bidirectional layer packs it (``pack_padded_sequence``), so
that its backward direction starts at each sequence's own last step. Packing costs: torch runs
a packed layer step by step outside oneDNN's fused kernel (a bidirectional 16-unit LSTM step on
32 x 64 tokens: 0.24 s packed, 0.019 s padded), so only the layers that need it pack. Padded
steps come out as zeros, as the Keras twin writes them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from zoo.hardware import SetupError
from zoo.nn.recurrent_config import RecurrentConfig
from zoo.nn.torch.embedding import Embedding
from zoo.nn.torch.recurrent_scan import ScanRecurrent
from zoo.nn.torch.remat import checkpointed_call

# (input size of the layer) -> a single-layer, batch-first recurrent module
LayerFactory = Callable[[int], nn.Module]


class RecurrentNet(nn.Module):
    """Classification: (N, T, input_size) float or (N, T) token ids -> (N, num_classes).
    Language modeling: (N, T) int64 token ids -> (N, T, vocab_size).

    ``padding_mask`` (N, T) bool marks padding with True; it must be at the end of each row.

    With ``grad_checkpointing`` on, training keeps only each recurrent layer's input for
    backward and reruns the layer there, instead of keeping every step's gates.
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: RecurrentConfig, make_layer: LayerFactory):
        super().__init__()
        self.zoo_config = cfg
        # zoo's Embedding: nn.Embedding that refuses ids outside the vocabulary as the Keras twin does.
        self.embedding = Embedding(cfg.vocab_size, cfg.embedding_dim) if cfg.reads_tokens else None
        self.recurrent = nn.ModuleList(make_layer(cfg.layer_input_size(i)) for i in range(cfg.num_layers))
        self.dropout = nn.Dropout(cfg.dropout)
        # A tied head owns only its bias; its weight is the embedding's (one tensor to train and save).
        self.head = (
            TiedHead(cfg.output_size) if cfg.tie_embeddings else nn.Linear(cfg.features, cfg.output_size)
        )

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def forward_features(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The last recurrent layer's outputs at every step, (N, T, hidden * directions)."""
        if self.embedding is not None:
            x = self.dropout(self.embedding(x))
        # Scans (zoo.nn.torch.recurrent_scan, what torch.export traces) read the mask themselves:
        # the right-padding check and the host-side lengths that packing needs depend on the
        # mask's values, which an exported graph cannot branch on.
        refuse_unsupported_low_precision(self.recurrent, x)
        scans = isinstance(self.recurrent[0], ScanRecurrent)
        lengths = None if padding_mask is None or scans else sequence_lengths(padding_mask)
        checkpointing = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        for index, layer in enumerate(self.recurrent):
            if index:
                x = self.dropout(x)
            if isinstance(layer, ScanRecurrent):
                x, _ = layer(x, padding_mask=padding_mask)
            else:
                if lengths is not None and self.zoo_config.bidirectional:
                    layer = Packed(layer, lengths)
                x, _ = checkpointed_call(layer, x) if checkpointing else layer(x)
            if padding_mask is not None:
                x = x.masked_fill(padding_mask.to(device=x.device, dtype=torch.bool)[..., None], 0.0)
        return x

    def forward_head(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        cfg = self.zoo_config
        if not cfg.language_model:
            x = pool(x, cfg, padding_mask)
        x = self.dropout(x)
        return self.head(x, self.embedding.weight) if cfg.tie_embeddings else self.head(x)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.forward_head(self.forward_features(x, padding_mask), padding_mask)


def refuse_unsupported_low_precision(layers: nn.ModuleList, x: torch.Tensor) -> None:
    """torch runs an autocast ``nn.LSTM`` on the CPU through oneDNN, which has no bfloat16 (or
    float16) LSTM on a CPU without those instructions (AVX512_BF16 / AMX / AVX512_FP16; e.g. an
    AMD Zen 2): torch's own error there is "could not create a primitive descriptor". Say what
    it means and what would work, before the first step fails inside the trainer."""
    if x.device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
        return
    if not any(isinstance(layer, nn.LSTM) for layer in layers):
        return
    dtype = torch.get_autocast_dtype("cpu")
    supported = {
        torch.bfloat16: torch.ops.mkldnn._is_mkldnn_bf16_supported,
        torch.float16: torch.ops.mkldnn._is_mkldnn_fp16_supported,
    }.get(dtype)
    if supported is None or supported():
        return
    name = str(dtype).removeprefix("torch.")
    raise SetupError(
        f"trainer.precision: torch's CPU LSTM (oneDNN) cannot run in {name} on this CPU, which has "
        f"no {name} instructions; use trainer.precision 32-true here, trainer.framework keras, "
        "or a GPU or a CPU with them (AVX512_BF16 / AMX)"
    )


class TiedHead(nn.Module):
    """A linear head whose weight is passed in (the token embedding); it keeps only a bias."""

    def __init__(self, outputs: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(outputs))

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.linear(x, weight, self.bias)


class Packed(nn.Module):
    """A recurrent layer run over a packed copy of a right-padded batch, padded back with zeros."""

    def __init__(self, layer: nn.Module, lengths: torch.Tensor):
        super().__init__()
        self.layer, self.lengths = layer, lengths

    def forward(self, x: torch.Tensor):
        packed = pack_padded_sequence(x, self.lengths, batch_first=True, enforce_sorted=False)
        out, state = self.layer(packed)
        return pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0], state


def sequence_lengths(padding_mask: torch.Tensor) -> torch.Tensor:
    """Real steps per row (int64, on the CPU as packing wants); refuses padding that is not at the end."""
    keep = ~padding_mask.to(torch.bool)
    lengths = keep.sum(dim=1)
    steps = torch.arange(keep.shape[1], device=keep.device)
    if not torch.equal(keep, steps[None, :] < lengths[:, None]):
        raise ValueError(
            "padding_mask must mark padding at the end of each sequence (right padding); "
            "pad on the right, or reverse the sequences first"
        )
    if bool((lengths == 0).any()):
        raise ValueError("padding_mask marks every step of a sequence as padding; drop empty sequences")
    return lengths.cpu()


def pool(x: torch.Tensor, cfg: RecurrentConfig, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """(N, T, D) -> (N, D): the mean over real steps, or each direction's final state."""
    if padding_mask is None:
        if cfg.pooling == "mean":
            return x.mean(dim=1)
        last = x[:, -1]
    else:
        keep = (~padding_mask.to(device=x.device, dtype=torch.bool)).unsqueeze(-1).to(x.dtype)
        if cfg.pooling == "mean":
            return (x * keep).sum(dim=1) / keep.sum(dim=1)
        ends = keep.sum(dim=1).long() - 1  # (N, 1): each row's last real step
        last = x.gather(1, ends[:, :, None].expand(-1, 1, x.shape[-1]))[:, 0]
    if not cfg.bidirectional:
        return last
    # The backward direction has read the whole sequence when it reaches step 0.
    h = cfg.hidden_size
    return torch.cat([last[:, :h], x[:, 0, h:]], dim=-1)
