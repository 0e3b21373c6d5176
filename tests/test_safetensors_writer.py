"""zoo's safetensors writer: the bytes safetensors' own ``save_file`` writes, and durable.

Every zoo checkpoint and export is written by ``zoo.checkpoint.writer.write_safetensors``: each
tensor made ready on a few threads (a strided one copied once, each checked finite) and
written at its offset by one, each part's writeback started as soon as it is written, then
one fsync and a rename. Here: the file is byte for byte what ``save_file`` writes for the
same tensors and metadata (safetensors itself orders the metadata's keys by hash, differently
in every process, so only that order may differ) and its own loaders read it; a stream of
tensors gives the same file; short writes, small parts and a platform without
``sync_file_range`` change nothing; and a failure or a kill at any point leaves the
previous file as it was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import zoo
from zoo.checkpoint import writer as safetensors_io
from zoo.checkpoint.file import SAFETENSORS_DTYPES, NonFiniteTensors
from zoo.checkpoint.tensors import model_tensors
from zoo.checkpoint.writer import TensorStream, write_safetensors

ONE_KEY = {"format": "pt"}
METADATA = {"zeta": "1", "alpha": 'quote " backslash \\ tab \t newline \n', "bell": "\x07", "é": "ünï 💾"}


def _tensors() -> dict[str, np.ndarray]:
    """Every dtype safetensors and numpy share, names out of order (one not ASCII), a 0-d and
    an empty tensor, a transposed view and a big-endian array (safetensors byte-swaps it)."""
    rng = np.random.default_rng(0)
    dtypes = {
        code: ml_dtypes.bfloat16 if name == "bfloat16" else name for code, name in SAFETENSORS_DTYPES.items()
    }
    tensors = {
        f"t.{code.lower()}": np.arange(15).reshape(3, 5).astype(dtype) for code, dtype in dtypes.items()
    }
    return tensors | {
        "a.kernel": rng.normal(size=(7, 9)).astype(np.float32).T,
        "b.big_endian": np.arange(6, dtype=">f4").reshape(2, 3),
        "c.scalar": np.array(7, np.int64),
        "d.empty": np.zeros((0, 4), np.float32),
        "ü.non_ascii": np.arange(4, dtype=np.float32),
        "A.upper": np.ones(3, np.float32),
    }


def _save_file_bytes(tmp_path, tensors, metadata) -> bytes:
    theirs = tmp_path / "theirs.safetensors"
    save_file(
        {k: np.require(v, requirements="C") for k, v in tensors.items()}, str(theirs), metadata=metadata
    )  # 0-d kept
    return theirs.read_bytes()


def _split(data: bytes) -> tuple[dict, bytes, bytes]:
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + length]), data[8 : 8 + length], data[8 + length :]


def test_the_file_is_what_save_file_writes_byte_for_byte(tmp_path):
    tensors = _tensors()
    ours = write_safetensors(tmp_path / "ours.safetensors", tensors, ONE_KEY).read_bytes()
    assert ours == _save_file_bytes(tmp_path, tensors, ONE_KEY)


def test_metadata_keys_keep_their_order_and_nothing_else_differs(tmp_path):
    """``save_file`` writes the metadata keys in a hash order: the same length, the same JSON,
    the same tensor bytes; safetensors' loaders read the file back exactly."""
    tensors = _tensors()
    path = write_safetensors(tmp_path / "ours.safetensors", tensors, METADATA)
    ours, theirs = path.read_bytes(), _save_file_bytes(tmp_path, tensors, METADATA)
    (our_header, our_text, our_data), (their_header, _, their_data) = _split(ours), _split(theirs)
    assert len(ours) == len(theirs) and our_header == their_header and our_data == their_data
    assert list(our_header["__metadata__"]) == list(METADATA)
    assert (len(our_text) % 8, our_text.rstrip(b" ")[-1:]) == (0, b"}")
    with safe_open(str(path), framework="np") as handle:
        assert handle.metadata() == METADATA
    loaded = load_file(path)
    for name, array in tensors.items():
        assert loaded[name].shape == array.shape and np.array_equal(loaded[name], array), name
        assert loaded[name].dtype == array.dtype.newbyteorder("="), name


def test_a_stream_in_any_order_gives_the_same_file(tmp_path):
    tensors = _tensors()
    layout = {name: (array.shape, array.dtype) for name, array in tensors.items()}
    stream = TensorStream(layout, ((name, tensors[name]) for name in reversed(tensors)))
    streamed = write_safetensors(tmp_path / "stream.safetensors", stream, ONE_KEY)
    assert streamed.read_bytes() == _save_file_bytes(tmp_path, tensors, ONE_KEY)


def test_short_writes_small_parts_and_no_sync_file_range_change_nothing(tmp_path, monkeypatch):
    tensors = _tensors() | {"e.large": np.arange(1000, dtype=np.float64).reshape(10, 100).T}
    expected = _save_file_bytes(tmp_path, tensors, ONE_KEY)
    pwrite, calls = os.pwrite, []

    def short(descriptor, data, offset):  # at most 5 bytes a call, as a signal could make it
        calls.append(offset)
        return pwrite(descriptor, memoryview(data)[:5], offset)

    monkeypatch.setattr(safetensors_io, "WRITE_PART", 24)
    monkeypatch.setattr(os, "pwrite", short)
    assert write_safetensors(tmp_path / "short.safetensors", tensors, ONE_KEY).read_bytes() == expected
    assert len(calls) > len(expected) // 5  # every call was short
    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(safetensors_io, "_writeback_starter", lambda: None)
    assert write_safetensors(tmp_path / "plain.safetensors", tensors, ONE_KEY).read_bytes() == expected


def test_a_low_precision_export_is_cast_after_its_check(tmp_path):
    tensors = {"w": np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4).T, "n": np.array(3, np.int64)}
    path = write_safetensors(tmp_path / "bf16.safetensors", tensors, ONE_KEY, float_dtype=ml_dtypes.bfloat16)
    cast = {"w": tensors["w"].astype(ml_dtypes.bfloat16), "n": tensors["n"]}
    assert path.read_bytes() == _save_file_bytes(tmp_path, cast, ONE_KEY)
    big = {"w": np.full(4, 1e5, np.float32)}  # finite in float32, inf in float16: written, as before
    with pytest.warns(RuntimeWarning, match="overflow"):
        path = write_safetensors(
            tmp_path / "f16.safetensors", big, {}, finite_source="x", float_dtype=np.float16
        )
    assert np.isinf(load_file(path)["w"]).all()


def test_non_finite_tensors_are_all_named_and_nothing_is_replaced(tmp_path, monkeypatch):
    """A NaN late in a tensor written in many parts, an infinity in a strided one (checked in
    its copy), with and without a low-precision export: all found, all named."""
    monkeypatch.setattr(safetensors_io, "WRITE_PART", 64)
    target = write_safetensors(tmp_path / "m.safetensors", {"w": np.zeros(3, np.float32)}, ONE_KEY)
    before = target.read_bytes()
    tensors = {
        "late": np.zeros(1000, np.float32),
        "kernel": np.zeros((20, 30), np.float32).T,
        "fine": np.ones(5),
    }
    tensors["late"][900], tensors["kernel"][29, 19] = np.nan, -np.inf
    for float_dtype in (None, np.float16):
        with pytest.raises(
            NonFiniteTensors,
            match=r"^source\.pt: 2 of 3 tensors hold NaN or infinite values \(late, kernel\)",
        ):
            write_safetensors(target, tensors, ONE_KEY, finite_source="source.pt", float_dtype=float_dtype)
        assert target.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]


def _failing_pwrite(after: int):
    pwrite, calls = os.pwrite, []

    def failing(descriptor, data, offset):
        calls.append(offset)
        if len(calls) > after:
            raise OSError(28, "No space left on device")
        return pwrite(descriptor, data, offset)

    return failing


@pytest.mark.parametrize(
    "fault",
    [
        "disk full mid-write",
        "stream fails mid-way",
        "tensor missing",
        "tensor twice",
        "wrong shape",
        "unknown dtype",
    ],
)
def test_a_failure_mid_write_leaves_the_previous_file(tmp_path, monkeypatch, fault):
    target = write_safetensors(tmp_path / "m.safetensors", {"w": np.zeros(3, np.float32)}, ONE_KEY)
    before = target.read_bytes()
    tensors = {f"t{i}": np.full((64, 64), i, np.float32) for i in range(6)}
    layout = {name: (array.shape, array.dtype) for name, array in tensors.items()}

    def stream(items, fail_after=None):
        for index, item in enumerate(items):
            if index == fail_after:
                raise RuntimeError("the twin could not be read")
            yield item

    items = list(tensors.items())
    monkeypatch.setattr(safetensors_io, "WRITE_PART", 4096)
    cases = {
        "disk full mid-write": (tensors, OSError, "No space left"),
        "stream fails mid-way": (TensorStream(layout, stream(items, 3)), RuntimeError, "could not be read"),
        "tensor missing": (TensorStream(layout, stream(items[:-1])), ValueError, "never given: t5"),
        "tensor twice": (TensorStream(layout, stream([*items, items[0]])), ValueError, "t0: .* twice"),
        "wrong shape": (
            TensorStream(layout, stream([*items[:2], ("t2", np.zeros((64, 63), np.float32)), *items[3:]])),
            ValueError, r"t2: float32 \[64, 63\], laid out as float32 \[64, 64\]",
        ),
        "unknown dtype": ({"c": np.zeros(2, np.complex64)}, ValueError, "safetensors has no dtype for c"),
    }  # fmt: skip
    tensors_given, error, message = cases[fault]
    if fault == "disk full mid-write":
        monkeypatch.setattr(os, "pwrite", _failing_pwrite(after=5))
    with pytest.raises(error, match=message):
        write_safetensors(target, tensors_given, ONE_KEY)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]


def test_the_file_is_fsynced_before_it_is_renamed_and_the_folder_after(tmp_path, monkeypatch):
    steps, fsync, replace = [], os.fsync, os.replace

    def recording_fsync(descriptor):
        steps.append(("fsync", os.path.realpath(f"/proc/self/fd/{descriptor}")))
        fsync(descriptor)

    def recording_replace(source, target):
        steps.append(("rename", os.path.basename(source), os.path.basename(target)))
        replace(source, target)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    path = write_safetensors(tmp_path / "m.safetensors", {"w": np.ones(3, np.float32)}, ONE_KEY)
    temporary = f".m.safetensors.{os.getpid()}.tmp"
    folder = os.path.realpath(tmp_path)
    assert steps == [
        ("fsync", os.path.join(folder, temporary)),
        ("rename", temporary, "m.safetensors"),
        ("fsync", folder),
    ]
    assert load_file(path)["w"].tolist() == [1, 1, 1]


def test_a_save_killed_mid_write_leaves_the_previous_checkpoint(tmp_path):
    """A process killed (SIGKILL) between two of its writes: the previous checkpoint is
    untouched and loads; the half-written temporary is what the next save removes."""
    model = zoo.create_model("convnet-tiny", framework="torch")
    target = zoo.save_checkpoint(model, tmp_path / "model.safetensors")
    before = target.read_bytes()
    script = textwrap.dedent(f"""
        import os, signal
        import numpy as np
        from zoo.checkpoint import writer as safetensors_io
        from zoo.checkpoint.writer import write_safetensors
        pwrite, calls = os.pwrite, []
        def dying(descriptor, data, offset):
            calls.append(offset)
            if len(calls) == 4:
                os.kill(os.getpid(), signal.SIGKILL)
            return pwrite(descriptor, data, offset)
        os.pwrite = dying
        safetensors_io.IO_THREADS = 1
        write_safetensors({str(target)!r}, {{f"t{{i}}": np.ones(1000, np.float32) for i in range(8)}}, {{}})
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    (leftover,) = tmp_path.glob(".model.safetensors.*.tmp")
    assert target.read_bytes() == before and leftover.stat().st_size > 0
    assert zoo.load_checkpoint(target).state_dict().keys() == model.state_dict().keys()
    zoo.save_checkpoint(model, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


@pytest.mark.parametrize("preset", ["gpt2-micro", "llama-micro"])
def test_a_keras_save_writes_the_torch_layout_bytes_a_torch_save_writes(tmp_path, preset):
    """The Keras twin's stream (views of its variables, kernels transposed by the writer)
    gives exactly the tensor bytes of ``save_file`` on its canonical tensors (llama: grouped
    key/value projections and a tied head, read from the one embedding variable)."""
    model = zoo.create_model(preset, framework="keras")
    path = zoo.save_checkpoint(model, tmp_path / "keras.safetensors")
    _, _, ours = _split(path.read_bytes())
    _, _, theirs = _split(_save_file_bytes(tmp_path, model_tensors(model), None))
    assert ours == theirs
