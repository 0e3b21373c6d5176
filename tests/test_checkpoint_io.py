"""The fast Keras checkpoint path keeps every guarantee of the ordinary one.

A Keras load builds the twin with its initialisers skipped (``zoo.nn.keras.skeleton``) and hands
freshly read, aligned arrays to the variables without copying them; a save reads variables
as views. Here: tied heads (gpt2's head is its token embedding, bert's MLM decoder is its word
embedding) round-trip bit for bit through both frameworks, a loaded model owns its memory (no
variable shares a buffer with another or with the caller's arrays), the skeleton falls back to
an ordinary build when it would leave a variable unfilled, and the helpers are exact.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import forward_keras, parity_config
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import zoo
from zoo import registry
from zoo.backend import load_checkpoint
from zoo.checkpoint.aligned import contiguous
from zoo.checkpoint.file import read_aligned
from zoo.checkpoint.keras_variables import tensors_to_keras
from zoo.checkpoint.tables import keras_layer
from zoo.checkpoint.tensors import model_tensors
from zoo.nn.keras import skeleton as keras_skeleton

TIED = [("gpt2-micro", {}), ("bert-micro", {"task": "masked_language_modeling"})]


def _create(name, fields, framework):
    fields = parity_config(name, **fields).model_dump(exclude={"architecture", "preset"})
    return zoo.create_model(name, framework=framework, **fields)


def _same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert np.array_equal(a[key], b[key]), key


@pytest.mark.parametrize(("name", "fields"), TIED, ids=[n for n, _ in TIED])
def test_tied_heads_round_trip_bit_for_bit_through_both_frameworks(name, fields, tmp_path):
    torch.manual_seed(7)
    family, config = registry.get_family(name), parity_config(name, **fields)
    x = config.example_input(2, seed=3)
    for source in ("keras", "lightning"):
        original = _create(name, fields, source)
        path = zoo.save_checkpoint(original, tmp_path / f"{source}.safetensors")
        _same(load_file(path), model_tensors(original))
        for target in ("keras", "lightning"):
            loaded = load_checkpoint(path, framework=target)
            _same(model_tensors(loaded), model_tensors(original))
        keras_model = load_checkpoint(path, framework="keras")
        again = zoo.save_checkpoint(keras_model, tmp_path / f"{source}-again.safetensors")
        _same(load_file(again), load_file(path))
    reference = family.build_keras(config)  # the ordinary way: a built twin, then an assignment
    tensors_to_keras(reference, family.weight_table(config), load_file(path))
    assert np.array_equal(
        forward_keras(keras_model, x, family, False), forward_keras(reference, x, family, False)
    )


def test_a_keras_load_owns_its_memory(tmp_path):
    """Variables adopted from the read arrays are independent: training one variable in place
    changes no other, and the file and a second load are untouched."""
    original = _create("gpt2-micro", {}, "keras")
    path = zoo.save_checkpoint(original, tmp_path / "m.safetensors")
    first, second = (load_checkpoint(path, framework="keras") for _ in range(2))
    buffers = [np.asarray(v.value) for v in first.weights]
    for i, a in enumerate(buffers):
        assert not any(np.may_share_memory(a, b) for b in buffers[i + 1 :]), first.weights[i].path
    for variable in first.trainable_weights:
        variable.assign_add(np.ones(variable.shape, variable.dtype))
    _same(model_tensors(second), load_file(path))


def test_a_keras_load_copies_nothing_it_reads(tmp_path, monkeypatch):
    """Every variable of a float32 checkpoint's Keras twin is the memory the file was read
    into (or the one transposed copy of it): nothing goes through ``convert_to_tensor``,
    which copies. (An aligned array's padding once made every untransposed tensor a copy.)"""
    import keras

    original = _create("gpt2-micro", {}, "keras")
    path = zoo.save_checkpoint(original, tmp_path / "m.safetensors")
    copied = []
    convert = keras.ops.convert_to_tensor

    def counting(value, *args, **kwargs):
        if isinstance(value, np.ndarray):
            copied.append(value.shape)
        return convert(value, *args, **kwargs)

    monkeypatch.setattr(keras.ops, "convert_to_tensor", counting)
    _same(model_tensors(load_checkpoint(path, framework="keras")), load_file(path))
    assert copied == []


def test_tensors_to_keras_copies_the_callers_arrays():
    model = _create("convnet-tiny", {}, "keras")
    table = registry.get_family("convnet-tiny").weight_table(model.zoo_config)
    tensors = model_tensors(model)
    tensors_to_keras(model, table, tensors)
    kept = {k: v.copy() for k, v in tensors.items()}
    for variable in model.trainable_weights:
        variable.assign_add(np.ones(variable.shape, variable.dtype))
    _same(tensors, kept)


def test_the_skeleton_build_skips_initialisers_and_says_what_is_left():
    family, config = registry.get_family("gpt2-micro"), parity_config("gpt2-micro")
    table = family.weight_table(config)
    with keras_skeleton.initialisers_skipped() as skipped:
        model = family.build_keras(config)
    filled = [keras_layer(keras_layer(model, p.layer), v) for p in table for v in p.variables]
    assert skipped.variables and skipped.draws  # gpt2 draws its residual projections again
    assert skipped.covered_by(iter(filled))
    assert not skipped.covered_by(iter(filled[1:])), "an unfilled variable is noticed"
    import keras

    assert keras.random.normal.__name__ == "normal", "Keras is restored on leaving"
    # No TensorFlow variable is made before its value is known, except where the build
    # assigned one (the redrawn projections: made from the draw, filled again by a load).
    unmade = [v for v in skipped.variables.values() if v._value is None]
    assert set(map(id, unmade)) == set(skipped.variables) - set(skipped.randomised) and unmade
    value = np.ones(unmade[0].shape, np.float32)
    keras_skeleton.fill(unmade[0], keras.ops.convert_to_tensor(value))
    assert np.array_equal(unmade[0].numpy(), value) and unmade[0]._initializer is None


def test_a_skeleton_build_that_reads_its_variables_gets_memory_for_them():
    """rnn's build runs a forward pass: the variables it reads are made then, uninitialised."""
    family, config = registry.get_family("rnn-tiny"), parity_config("rnn-tiny")
    with keras_skeleton.initialisers_skipped() as skipped:
        model = family.build_keras(config)
    assert skipped.variables and all(v._value is not None for v in skipped.variables.values())
    assert model.weights and all(w.shape == w.numpy().shape for w in model.weights)


def test_an_uncovered_skeleton_falls_back_to_the_ordinary_build(tmp_path, monkeypatch):
    original = _create("convnet-tiny", {}, "keras")
    path = zoo.save_checkpoint(original, tmp_path / "m.safetensors")
    monkeypatch.setattr(keras_skeleton.Skipped, "covered_by", lambda self, variables: False)
    _same(model_tensors(load_checkpoint(path, framework="keras")), load_file(path))


@pytest.mark.parametrize("shape", [(5, 70), (70, 5), (3, 4, 5), (64, 33), (40, 1024)])  # 1024: 4 KiB rows
def test_contiguous_is_an_exact_aligned_copy(shape):
    array = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    for view in (array, array.T, array[::2]):
        copy = contiguous(view)
        assert copy.flags.c_contiguous and copy.ctypes.data % 64 == 0
        assert np.array_equal(copy, view) and not np.may_share_memory(copy, array)


def test_read_aligned_reads_what_safetensors_reads(tmp_path):
    from zoo.checkpoint.writer import write_safetensors

    tensors = {
        "a": np.arange(7, dtype=np.float32),
        "b": np.arange(12, dtype=np.int64).reshape(3, 4),
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.array(3, np.int64),
    }
    path = write_safetensors(tmp_path / "t.safetensors", tensors, {"k": "v"})
    got = read_aligned(path)
    _same(got, load_file(path))
    assert all(a.ctypes.data % 64 == 0 for a in got.values() if a.size)


@pytest.mark.parametrize("preadv", [True, False], ids=["preadv", "readinto"])
def test_read_aligned_reads_more_tensors_than_one_call_takes(tmp_path, monkeypatch, preadv):
    from zoo.checkpoint.writer import write_safetensors

    if not preadv:
        monkeypatch.delattr("os.preadv", raising=False)
    monkeypatch.setattr("os.IOV_MAX", 7, raising=False)  # 40 non-empty tensors: six preadv calls
    tensors = {f"t{i:02d}": np.full((i % 5, 3), i, np.float32) for i in range(50)}
    path = write_safetensors(tmp_path / "t.safetensors", tensors, {})
    _same(read_aligned(path), tensors)


def test_read_aligned_refuses_a_file_cut_short_after_its_check(tmp_path):
    from zoo.checkpoint.file import CheckpointError
    from zoo.checkpoint.writer import write_safetensors

    path = write_safetensors(tmp_path / "t.safetensors", {"a": np.ones((100, 100), np.float32)}, {})
    data = path.read_bytes()
    path.write_bytes(data[:-4000])
    with pytest.raises(CheckpointError, match="cut short; it was truncated after it was checked"):
        read_aligned(path)


def test_read_aligned_refuses_a_gap_between_tensors(tmp_path):
    import json

    from zoo.checkpoint.file import CheckpointError

    header = json.dumps({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]},
    }).encode()  # fmt: skip
    path = tmp_path / "gap.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(20))
    with pytest.raises(CheckpointError, match="b does not start where the tensor before it ends"):
        read_aligned(path)


def test_spares_recycle_only_tensors_no_variable_keeps():
    """Ports run with ``Spares`` (as a Keras load runs them) make the values they make
    without: transposes land in the memory of tensors already used up, never in one that a
    later port still reads ("a.weight", read again by the last port) or a variable adopts
    ("b", of the same size), and no two values share memory."""
    from zoo.checkpoint.keras_variables import Spares, _root, keras_arrays, port_arrays
    from zoo.checkpoint.tables import Port, TensorSpec, dense

    def port(name: str, shape: tuple[int, ...], to_keras) -> Port:
        return Port((TensorSpec(name, shape, "float32", True),), name, ("v",), to_keras, to_keras)

    table = [
        dense("a", 4, 8),
        port("b", (4, 8), lambda b: (b,)),
        dense("c", 8, 4),
        dense("d", 8, 4),
        port("a.weight", (8, 4), lambda w: (w.T,)),
    ]
    rng = np.random.default_rng(0)
    read = {s.name: contiguous(rng.normal(size=s.shape).astype(np.float32)) for p in table for s in p.tensors}
    expected = keras_arrays(table, read)
    originals = {name: array.copy() for name, array in read.items()}
    spares = Spares(table)
    got = [array for p in table for array in port_arrays(p, read, spares)]
    for value, want in zip(got, expected, strict=True):  # checked after every port ran
        assert np.array_equal(value, want)
    roots = [id(_root(value)) for value in got]
    assert len(set(roots)) == len(roots)  # every variable gets memory of its own
    overwritten = {name for name, array in read.items() if not np.array_equal(array, originals[name])}
    assert overwritten == {"c.weight", "d.weight"}  # d's kernel into c's memory, the tied one into d's


def test_a_keras_load_names_every_non_finite_tensor(tmp_path):
    from zoo.backend import save_checkpoint
    from zoo.checkpoint.file import NonFiniteTensors

    model = _create("gpt2-micro", {}, "keras")
    path = save_checkpoint(model, tmp_path / "m.safetensors")
    tensors = load_file(path)
    kernel = next(n for n, a in tensors.items() if a.ndim == 2 and "attn" in n)  # transposed for Keras
    bias = next(n for n, a in tensors.items() if a.ndim == 1)  # adopted as it is
    tensors[kernel][0, 0], tensors[bias][-1] = np.inf, np.nan
    with safe_open(str(path), framework="np") as handle:
        metadata = handle.metadata()
    save_file(tensors, str(path), metadata=metadata)
    with pytest.raises(NonFiniteTensors, match=rf"2 of {len(tensors)} tensors hold NaN") as error:
        load_checkpoint(path, framework="keras")
    assert kernel in str(error.value) and bias in str(error.value)
