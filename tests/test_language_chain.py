"""The language user's path end to end: a transformers GPT-2 directory with its tokenizer ->
``zoo import`` -> fine-tuning on a text file in the other framework -> ``zoo export --format hf``
-> transformers' ``from_pretrained`` gives zoo's logits, and the tokenizer travels all the way.

The directory is the reference's tiny GPT-2 (``tests/reference/hf_gpt2.py``), given a character
tokenizer.json of its vocabulary's size (a byte-level BPE cannot be that small).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import reference_env
import safetensors.numpy
import torch
from conftest import relative_error

import zoo
from zoo.checkpoint_tokenizer import tokenizer_of
from zoo.interchange import InterchangeError
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.importing import import_checkpoint
from zoo.tokenizer import CharTokenizer

TEXT = "def train(recipe, framework):\n    return zoo.train(recipe, framework)\n" * 80


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_env.fixtures("hf_gpt2.py")


@pytest.fixture
def source(reference, tmp_path) -> Path:
    """The tiny GPT-2 directory, with a tokenizer.json as transformers saves one beside the weights."""
    directory = tmp_path / "tiny-gpt2"
    shutil.copytree(reference / "tiny", directory)
    CharTokenizer("".join(sorted(set(TEXT)))).save(directory)
    return directory


def test_import_finetune_export_keeps_weights_numbers_and_tokenizer(reference, source, tmp_path):
    imported = import_checkpoint(source, tmp_path / "imported")
    assert imported.tokenizer == imported.path.with_name("tokenizer.json")
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    recipe = {
        "model": {"architecture": "gpt2"},
        "data": {"name": "text", "path": str(text), "seq_len": 16, "batch_size": 8},
        "optimizer": {"name": "adamw", "lr": 0.001},
        "trainer": {"max_epochs": 1, "progress_bar": False},
        "init": {"from": str(imported.path)},
        "export": {"dir": str(tmp_path / "runs")},
    }
    tuned = zoo.train(recipe, "keras").checkpoint
    before, after = safetensors.numpy.load_file(imported.path), safetensors.numpy.load_file(tuned)
    assert before.keys() == after.keys() and any(not np.array_equal(before[k], after[k]) for k in before)
    assert tokenizer_of(tuned).encode(TEXT[:40]) == tokenizer_of(imported.path).encode(TEXT[:40])

    exported = export_checkpoint(tuned, "hf", tmp_path / "hf")
    assert json.loads(exported.with_name("tokenizer.json").read_text()) == json.loads(
        (source / "tokenizer.json").read_text()
    )
    inputs, padding = reference / "tiny-inputs.npy", reference / "tiny-padding.npy"
    out = reference_env.run("hf_gpt2.py", tmp_path / "ref", "exported", str(exported.parent), str(inputs),
                            str(padding))  # fmt: skip
    loaded = json.loads((out / "loaded.json").read_text())
    assert loaded["missing_keys"] == loaded["unexpected_keys"] == loaded["mismatched_keys"] == []
    model = zoo.load_checkpoint(tuned, framework="lightning").eval()
    ids, pad = np.load(inputs), np.load(padding)
    with torch.no_grad():
        expected = model(torch.from_numpy(ids), padding_mask=torch.from_numpy(pad)).numpy()
    assert relative_error(np.load(out / "logits.npy")[~pad], expected[~pad]) <= 1e-4


def test_a_tokenizer_larger_than_the_vocabulary_is_refused_and_nothing_is_written(source, tmp_path):
    CharTokenizer("".join(chr(c) for c in range(0x4E00, 0x4E00 + 200))).save(source)  # 200 > 101
    with pytest.raises(
        InterchangeError, match=r"tokenizer has 20\d tokens but the weights' vocabulary has 101"
    ):
        import_checkpoint(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()
