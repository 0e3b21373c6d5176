"""The scan stand-ins that let torch.export keep a recurrent net's steps dynamic
(zoo.nn.torch.recurrent_scan) compute what torch's fused layers compute.

Random weights (torch's default init, biases randomised too), every layer type, several
layers, both directions, and right-padded batches against torch's packed sequences: the
stand-in reads a padding mask where the training model packs. Then an exported program at
lengths other than the traced one.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from zoo.nn.torch.recurrent_scan import ScanRecurrent, exportable

TOLERANCE = 1e-6  # float32: the fused kernels add in another order
LAYERS = {
    "lstm": lambda **kw: nn.LSTM(**kw),
    "gru": lambda **kw: nn.GRU(**kw),
    "rnn-tanh": lambda **kw: nn.RNN(**kw),
    "rnn-relu": lambda **kw: nn.RNN(nonlinearity="relu", **kw),
}
LENGTHS = (6, 2, 5, 1)


def layer(kind: str, num_layers: int = 2, bidirectional: bool = True, batch_first: bool = True) -> nn.RNNBase:
    torch.manual_seed(0)
    module = LAYERS[kind](
        input_size=5,
        hidden_size=4,
        num_layers=num_layers,
        bidirectional=bidirectional,
        batch_first=batch_first,
    )
    with torch.no_grad():  # torch's init draws biases like weights; shift them so a bias mix-up shows
        for name, parameter in module.named_parameters():
            if name.startswith("bias"):
                parameter.add_(torch.randn_like(parameter))
    return module.eval()


def flat(state) -> list[torch.Tensor]:
    return list(state) if isinstance(state, tuple) else [state]


def assert_close(got, expected) -> None:
    for g, e in zip(flat(got), flat(expected), strict=True):
        assert g.shape == e.shape
        assert (g - e).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize("kind", list(LAYERS))
@pytest.mark.parametrize(("num_layers", "bidirectional"), [(1, False), (2, True)], ids=["1-uni", "2-bi"])
@pytest.mark.parametrize("batch_first", [True, False], ids=["batch-first", "steps-first"])
def test_scan_equals_the_fused_layer(kind, num_layers, bidirectional, batch_first):
    module = layer(kind, num_layers, bidirectional, batch_first)
    x = torch.randn(3, 7, 5) if batch_first else torch.randn(7, 3, 5)
    with torch.no_grad():
        expected, expected_state = module(x)
        got, state = ScanRecurrent(module)(x)
    assert_close(got, expected)
    assert_close(state, expected_state)


@pytest.mark.parametrize("kind", list(LAYERS))
def test_initial_state_is_read(kind):
    module = layer(kind)
    x = torch.randn(2, 4, 5)
    h = torch.randn(4, 2, 4)
    hx = (h, torch.randn(4, 2, 4)) if kind == "lstm" else h
    with torch.no_grad():
        assert_close(ScanRecurrent(module)(x, hx)[0], module(x, hx)[0])


def padded(batch: int = len(LENGTHS)) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lengths = torch.tensor(LENGTHS[:batch])
    steps = int(lengths.max())
    mask = torch.arange(steps)[None, :] >= lengths[:, None]
    x = torch.randn(batch, steps, 5).masked_fill(mask[..., None], 7.0)  # pads that would show
    return x, mask, lengths


def packed(module: nn.RNNBase, x: torch.Tensor, lengths: torch.Tensor):
    out, state = module(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    return pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0], state


@pytest.mark.parametrize("kind", list(LAYERS))
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_a_padded_batch_is_a_packed_sequence(kind, bidirectional):
    """Outputs zero at padding, final states at each row's own end: torch's packed results."""
    module = layer(kind, 2, bidirectional)
    x, mask, lengths = padded()
    with torch.no_grad():
        expected, expected_state = packed(module, x, lengths)
        got, state = ScanRecurrent(module)(x, padding_mask=mask)
    assert_close(got, expected)
    assert_close(state, expected_state)


def test_a_packed_sequence_is_refused_with_what_to_pass():
    x, _, lengths = padded()
    with pytest.raises(TypeError, match="padding_mask"):
        ScanRecurrent(layer("gru"))(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))


def test_exportable_swaps_a_copy():
    model = nn.Sequential(layer("gru"), nn.ModuleList([layer("lstm")]))
    swapped = exportable(model)
    assert isinstance(model[0], nn.GRU) and isinstance(model[1][0], nn.LSTM)
    assert isinstance(swapped[0], ScanRecurrent) and isinstance(swapped[1][0], ScanRecurrent)
    assert torch.equal(swapped[0].layer.weight_hh_l1_reverse, model[0].weight_hh_l1_reverse)
    assert isinstance(exportable(layer("rnn-tanh")), ScanRecurrent)
    linear = nn.Linear(2, 2)
    assert exportable(linear) is linear


def test_a_recurrent_net_computes_the_same_with_scans():
    """zoo's recurrent net routes the mask to its scans (eager here; exported in test_deploy)."""
    from zoo import registry

    for fields in (dict(cell="gru", bidirectional=True, pooling="last"), dict(pooling="mean")):
        config = registry.resolve_config("lstm", hidden_size=4, embedding_dim=5, num_layers=2, **fields)
        torch.manual_seed(0)
        model = registry.get_family("lstm").build_torch(config).eval()
        _, mask, _ = padded()
        inputs = torch.randn(*mask.shape, config.input_size)
        with torch.no_grad():
            assert_close(exportable(model)(inputs, padding_mask=mask), model(inputs, padding_mask=mask))


def test_exported_program_reads_other_lengths():
    """One export, traced at one length, run at two others and two batch sizes, padded."""
    from torch.export import Dim

    module = layer("lstm", 1, bidirectional=True)

    class Forward(nn.Module):
        def __init__(self):
            super().__init__()
            self.scan = ScanRecurrent(module)

        def forward(self, x: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
            return self.scan(x, padding_mask=padding_mask)[0]

    x, mask, _ = padded(2)
    axes = {0: Dim("batch", min=1, max=64), 1: Dim("steps", min=1, max=64)}
    program = torch.export.export(
        Forward(), (x, mask), dynamic_shapes={"x": axes, "padding_mask": axes}, strict=False
    ).module()
    for batch in (1, 4):
        for steps in (3, 9):
            lengths = torch.tensor([steps, *range(1, batch)][:batch])
            mask = torch.arange(steps)[None, :] >= lengths[:, None]
            x = torch.randn(batch, steps, 5)
            with torch.no_grad():
                assert_close(program(x, mask), packed(module, x, lengths)[0])
