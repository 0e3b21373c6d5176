"""Fine-tuning into another task: a masked language model's backbone under a new classifier.

The task comes from the data; what a task owns (BERT's pooler and classifier, its masked-LM
head) is swapped by name, never guessed from shapes: the new task's tensors start fresh, the
old task's are left out, the backbone and the tokenizer carry over, in both frameworks.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from safetensors.numpy import load_file

import zoo
from zoo.checkpoint_tokenizer import tokenizer_of

SENTENCES = [
    ("the loop repeats the block while the condition holds", 0),
    ("a function returns a value to its caller", 1),
    ("the list grows when an item is appended", 2),
    ("an exception unwinds the stack until it is caught", 0),
    ("a class defines the attributes of its instances", 1),
    ("the dictionary maps each key to one value", 2),
]


def recipe(tmp_path, data: dict) -> dict:
    return {
        "model": {"architecture": "bert-micro"},
        "data": {"tokenizer": "bpe", "bpe_vocab_size": 300, "batch_size": 8, **data},
        "optimizer": {"name": "adamw", "lr": 0.01},
        "trainer": {"max_epochs": 1, "progress_bar": False},
        "export": {"dir": str(tmp_path)},
    }


@pytest.fixture(scope="module")
def masked_lm(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlm")
    text = root / "corpus.txt"
    text.write_text(" ".join(s for s, _ in SENTENCES) * 30)
    data = {"name": "text", "task": "masked_language_modeling", "path": str(text), "seq_len": 32}
    return zoo.train(recipe(root, data), "lightning").checkpoint


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_a_classifier_fine_tuned_from_a_masked_lm_keeps_its_backbone(masked_lm, framework, tmp_path, caplog):
    labelled = tmp_path / "labelled.csv"
    labelled.write_text("text,label\n" + "".join(f'"{s}",{y}\n' for s, y in SENTENCES * 6))
    data = {"name": "text_classification", "path": str(labelled), "max_length": 32}
    classify = {**recipe(tmp_path, data), "init": {"from": str(masked_lm), "freeze_backbone": True}}
    with caplog.at_level(logging.INFO, logger="zoo"):
        result = zoo.train(classify, framework)
    assert "re-initialised: pooler.weight, pooler.bias, head.classifier.weight, head.classifier.bias" in (
        caplog.text
    )
    assert "left out (the checkpoint's task only): head.bias, head.dense.weight" in caplog.text
    before, after = load_file(masked_lm), load_file(result.checkpoint)
    assert not any(name.startswith("head.dense") for name in after)
    backbone = [name for name in after if not name.startswith(("pooler", "head."))]
    assert backbone and all(np.array_equal(before[n], after[n]) for n in backbone)
    # The token ids mean what they meant to the masked LM: its tokenizer came along.
    text = SENTENCES[0][0]
    assert tokenizer_of(result.checkpoint).encode(text) == tokenizer_of(masked_lm).encode(text)
