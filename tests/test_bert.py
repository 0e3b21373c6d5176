"""The bert family is transformers' BertModel and its heads: same weights in, same outputs out, in
both frameworks, with padding masks and token types.

The oracle is ``tests/reference/hf_bert.py``, run once in the reference environment: transformers
models built from ``BertConfig(...)``, randomised (LayerNorm weights and biases, every bias, weights
scaled for far-from-uniform attention), saved as transformers saves them, with their outputs on
padded batches with two segments. Each goes through ``zoo import`` (the directory) into a zoo
checkpoint that each twin loads; the case names say what the file exercises (see the script).

Tolerance: relative error in the max norm, ``max |zoo - hf| / max |hf|`` over the real (not
padding) tokens, at most 1e-4 (float32, eval mode). Measured (torch 2.13, TF 2.21, transformers
5.23, CPU): hidden states 3e-7 - 1.2e-6, pooler outputs up to 3.7e-6, logits up to 9.2e-7, both
twins; transformers' attention runs through ``scaled_dot_product_attention``, zoo's spells the
same products out. Padding tokens' own outputs are not compared: zoo lets a padding token attend
to itself (no empty softmax row), transformers lets it attend to the real tokens; no real token
sees either.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import reference_env
import torch
from conftest import relative_error

import zoo
from architectures.bert.formats import from_hf, to_hf
from zoo import registry
from zoo.checkpoint.foreign import ForeignLayoutError
from zoo.checkpoint.keras_variables import tensors_to_keras
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tables import count_parameters, keras_layer, tensor_specs
from zoo.checkpoint.tensors import load_tensors, model_tensors
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.foreign_files import read_foreign
from zoo.interchange.importing import import_checkpoint
from zoo.nn.errors import InputError
from zoo.preprocessing import Preprocessing

REFERENCE = 1e-4  # relative, max norm: zoo's twins against transformers
FAMILY = registry.get_family("bert")
CASES = {  # case: the task its file imports as
    "cls": "classification",
    "token": "token_classification",
    "mlm": "masked_language_modeling",
    "prefixed": "features",
    "old": "masked_language_modeling",
}
TASKS = ("features", "classification", "token_classification", "masked_language_modeling")


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_env.fixtures("hf_bert.py")


@pytest.fixture(scope="module")
def imported(reference, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("imported")
    heads = {"prefixed": 2}  # weights alone: no config.json says the head count
    return {
        case: import_checkpoint(reference / case, root / case, num_heads=heads.get(case)).path
        for case in CASES
    }


def inputs(reference: Path, case: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids, zoo's padding mask (True at padding) and the token types of a case."""
    found = np.load(reference / f"{case}-inputs.npz")
    return found["ids"], found["attention_mask"] == 0, found["token_type_ids"]


def outputs(model, framework: str, ids, padding, types) -> dict[str, np.ndarray]:
    """The last hidden state, the pooler output (where the model has a pooler) and the output."""
    if framework == "lightning":
        model.eval()
        with torch.no_grad():
            h = model.forward_features(*(torch.from_numpy(a) for a in (ids, padding, types)))
            found = {"hidden": h, "out": model(*(torch.from_numpy(a) for a in (ids, padding, types)))}
            if model.pooler is not None:
                found["pooled"] = model.pool(h)
        return {k: v.numpy() for k, v in found.items()}
    h = model.forward_features(ids, padding, types)
    found = {"hidden": h, "out": model(ids, padding_mask=padding, token_type_ids=types)}
    if model.pooler is not None:
        found["pooled"] = model.pool(h)
    return {k: np.asarray(v) for k, v in found.items()}


def assert_like_transformers(reference: Path, case: str, got: dict[str, np.ndarray], padding) -> None:
    real = ~padding
    assert relative_error(got["hidden"][real], np.load(reference / f"{case}-hidden.npy")[real]) <= REFERENCE
    if (reference / f"{case}-pooled.npy").is_file():
        assert relative_error(got["pooled"], np.load(reference / f"{case}-pooled.npy")) <= REFERENCE
    if (reference / f"{case}-logits.npy").is_file():
        expected = np.load(reference / f"{case}-logits.npy")
        per_token = expected.ndim == 3
        assert got["out"].shape == expected.shape
        assert relative_error(got["out"][real] if per_token else got["out"],
                              expected[real] if per_token else expected) <= REFERENCE  # fmt: skip
    else:  # a BertModel: the output is the last hidden state
        assert np.array_equal(got["out"], got["hidden"])


# ------------------------------------------------------------------------------ the model


def test_parameter_counts_are_transformers(reference):
    counts = json.loads((reference / "counts.json").read_text())
    listed = {e.name: e.parameters for e in zoo.list_architectures()}
    for preset in ("bert-tiny", "bert-mini", "bert-small", "bert-minilm-l6", "bert-base"):
        assert listed[preset] == counts[preset], preset
    assert counts["bert-base"] == 109_482_240  # the figure, as transformers counts BertModel
    for task, cls in (
        ("classification", "BertForSequenceClassification"),
        ("token_classification", "BertForTokenClassification"),
        ("masked_language_modeling", "BertForMaskedLM"),
    ):
        config = registry.resolve_config("bert-base", task=task)
        assert count_parameters(FAMILY.weight_table(config)) == counts[f"bert-base-{cls}"], task


@pytest.mark.parametrize("framework", ["lightning", "keras"])
@pytest.mark.parametrize("case", list(CASES))
def test_outputs_are_transformers(reference, imported, case, framework):
    config = read_checkpoint(imported[case]).config
    assert config.task == CASES[case]
    ids, padding, types = inputs(reference, case)
    assert padding.any() and not padding.all() and types.any()  # masks and segments that say something
    model = zoo.load_checkpoint(imported[case], framework=framework)
    assert_like_transformers(reference, case, outputs(model, framework, ids, padding, types), padding)


@pytest.mark.slow
def test_bert_base_is_transformers_in_both_twins(reference, tmp_path):
    """bert-base's shape (12 x 768, vocab 30,522) as BertModel saves it, on a short padded batch."""
    path = import_checkpoint(reference / "base", tmp_path / "base", architecture="bert-base").path
    ids, padding, types = inputs(reference, "base")
    for framework in ("lightning", "keras"):
        model = zoo.load_checkpoint(path, framework=framework)
        assert model.zoo_config.preset == "bert-base"
        assert_like_transformers(reference, "base", outputs(model, framework, ids, padding, types), padding)


def test_imports_take_what_real_files_carry(reference):
    """The prefixed file has no config.json (the head count is given); the old one has gamma/beta,
    the position_ids buffer, the tied decoder written out and a pre-training file's pooler and
    next-sentence head, which transformers' BertForMaskedLM leaves out too."""
    tensors, meta = read_foreign(reference / "prefixed")
    assert meta == {} and all(k.startswith("bert.") for k in tensors)
    fields, _ = from_hf(tensors, meta, num_heads=2)
    assert (fields["num_heads"], fields["task"], fields.get("pooler", True)) == (2, "features", True)
    tensors, meta = read_foreign(reference / "old")
    assert any(k.endswith("LayerNorm.gamma") for k in tensors) and "bert.embeddings.position_ids" in tensors
    assert "cls.predictions.decoder.weight" in tensors and "cls.seq_relationship.weight" in tensors
    fields, canonical = from_hf(tensors, meta)
    assert fields["task"] == "masked_language_modeling" and fields["num_heads"] == 1
    assert np.array_equal(canonical["embeddings.word.weight"], tensors["cls.predictions.decoder.weight"])


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_mean_pool_is_sentence_transformers(reference, imported, framework):
    """The mean of the real tokens' last hidden states (sentence-transformers' mean pooling)."""
    ids, padding, types = inputs(reference, "prefixed")
    hidden = np.load(reference / "prefixed-hidden.npy")
    keep = (~padding)[..., None]
    expected = (hidden * keep).sum(1) / keep.sum(1)
    model = zoo.load_checkpoint(imported["prefixed"], framework=framework)
    if framework == "lightning":
        model.eval()
        with torch.no_grad():
            h = model.forward_features(*(torch.from_numpy(a) for a in (ids, padding, types)))
            got = model.mean_pool(h, torch.from_numpy(padding)).numpy()
    else:
        got = np.asarray(model.mean_pool(model.forward_features(ids, padding, types), padding))
    assert relative_error(got, expected) <= REFERENCE


# ------------------------------------------------------------------------------ the hf format


def _randomised(config, seed: int = 0):
    torch.manual_seed(seed)
    model = FAMILY.build_torch(config)
    rng = np.random.default_rng(seed)
    load_tensors(
        model, {k: v + rng.normal(0, 0.1, v.shape).astype(v.dtype) for k, v in model_tensors(model).items()}
    )
    return model


LABEL_NAMES = ("sun", "rain", "snow", "fog", "hail", "wind", "calm")


def test_export_loads_strictly_in_transformers(tmp_path):
    """One zoo model per task (3 x 48, 4 heads of 12, 3 token types, 7 classes, vocabulary 90),
    randomised, exported: transformers' class for the task loads every tensor as written (the MLM
    decoder re-tied to the word embedding) and gives the torch twin's outputs on a padded batch."""
    root = tmp_path / "hf"
    fields = dict(hidden_size=48, num_layers=3, num_heads=4, intermediate_size=80, type_vocab_size=3,
                  vocab_size=90, num_classes=7, max_len=32)  # fmt: skip
    config = registry.resolve_config("bert", **fields)
    ids = config.example_input(3, seed=1)[:, :6].repeat(2, axis=1)  # 12 tokens
    padding = np.zeros(ids.shape, dtype=bool)
    padding[1, 9:], padding[2, 4:] = True, True
    types = np.where(np.arange(12) >= 5, 2, 0)[None].repeat(3, axis=0) * ~padding
    root.mkdir()
    np.savez(root / "inputs.npz", ids=ids, attention_mask=(~padding).astype(np.int64), token_type_ids=types)
    expected = {}
    for task in TASKS:
        model = _randomised(registry.resolve_config("bert", task=task, **fields))
        labelled = task in ("classification", "token_classification")
        recorded = Preprocessing(source="test", labels=LABEL_NAMES) if labelled else None
        checkpoint = zoo.save_checkpoint(model, tmp_path / f"{task}.safetensors", preprocessing=recorded)
        written = export_checkpoint(checkpoint, "hf", root / task)
        assert written == root / task / "model.safetensors"
        expected[task] = outputs(model, "lightning", ids, padding, types)["out"]
    out = reference_env.run("hf_bert.py", tmp_path / "ref", "exported", str(root))
    loaded = json.loads((out / "loaded.json").read_text())
    for task in ("classification", "token_classification"):  # the checkpoint's label names
        assert loaded[task].pop("id2label") == {str(i): name for i, name in enumerate(LABEL_NAMES)}, task
    for task in TASKS:
        assert {k: v for k, v in loaded[task].items() if k != "tied"} == {
            "missing_keys": [], "unexpected_keys": [], "mismatched_keys": [], "error_msgs": []
        }, task  # fmt: skip
        real = ~padding
        got, want = np.load(out / f"{task}.npy"), expected[task]
        assert (
            relative_error(got[real] if got.ndim == 3 else got, want[real] if want.ndim == 3 else want)
            <= 1e-5
        )
    assert loaded["masked_language_modeling"]["tied"] is True


@pytest.mark.parametrize("task", TASKS)
def test_import_then_export_is_bit_identical(task):
    config = registry.resolve_config("bert-micro", task=task, vocab_size=40, num_classes=3, num_heads=1)
    tensors, meta = to_hf(config, model_tensors(_randomised(config)))
    fields, canonical = from_hf(tensors, meta)
    back, meta_back = to_hf(FAMILY.config.model_validate({**fields, "architecture": "bert"}), canonical)
    assert meta_back == meta and list(back) == list(tensors)
    assert all(np.array_equal(back[k], tensors[k]) for k in tensors)
    if task == "masked_language_modeling":
        assert not any(
            k.startswith("cls.predictions.decoder") for k in tensors
        )  # written once: the embedding


def test_the_format_refuses_what_zoo_bert_cannot_hold():
    config = registry.resolve_config(
        "bert-micro", task="masked_language_modeling", vocab_size=40, num_heads=1
    )
    tensors, meta = to_hf(config, model_tensors(_randomised(config)))
    for key, value in (("hidden_act", "gelu_new"), ("position_embedding_type", "relative_key"),
                       ("is_decoder", True)):  # fmt: skip
        with pytest.raises(
            ForeignLayoutError, match=rf"config.json's {key} is {value!r}: zoo's bert computes"
        ):
            from_hf(tensors, {**meta, key: value})
    untied = {
        **tensors,
        "cls.predictions.decoder.weight": tensors["bert.embeddings.word_embeddings.weight"] + 1,
    }
    with pytest.raises(ForeignLayoutError, match=r"decoder.weight differs from the word embedding"):
        from_hf(untied, meta)
    with pytest.raises(ForeignLayoutError, match=r"architectures is \['BertForQuestionAnswering'\]"):
        from_hf(tensors, {**meta, "architectures": ["BertForQuestionAnswering"]})
    with pytest.raises(ForeignLayoutError, match=r"num_hidden_layers is 3, the tensors say 2"):
        from_hf(tensors, {**meta, "num_hidden_layers": 3})
    with pytest.raises(ForeignLayoutError, match=r"width-32 BERT has .*pass zoo import --num-heads N"):
        from_hf(tensors, {})
    with pytest.raises(ForeignLayoutError, match=r"unplaced cls.predictions.extra"):
        from_hf({**tensors, "cls.predictions.extra": np.zeros(3, np.float32)}, meta)


# ------------------------------------------------------------------------------ input and training


def test_both_twins_refuse_bad_input_in_the_same_words():
    config = registry.resolve_config("bert-micro", vocab_size=40, max_len=8)
    ids = config.example_input(2)
    torch_model, keras_model = FAMILY.build_torch(config), FAMILY.build_keras(config)
    cases = [
        ((ids, None, np.full_like(ids, 2)), r"token_type_ids must lie in \[0, 2\)"),
        ((np.concatenate([ids, ids], 1), None, None), r"sequence of 16 steps is longer than max_len 8"),
        ((ids, np.zeros((2, 3), bool), None), r"padding_mask must have the token ids' shape \(2, 8\)"),
    ]
    for (x, padding, types), message in cases:
        with pytest.raises(InputError, match=message):
            torch_model(*(None if a is None else torch.from_numpy(a) for a in (x, padding, types)))
        with pytest.raises(InputError, match=message):
            keras_model(x, padding_mask=padding, token_type_ids=types)


def _gradients(model, framework: str, ids, padding, checkpointing: bool = False) -> dict[str, np.ndarray]:
    FAMILY.set_grad_checkpointing(model, framework, checkpointing)
    if framework == "lightning":
        model.train()
        model.zero_grad(set_to_none=True)
        (model(torch.from_numpy(ids), torch.from_numpy(padding)) ** 2).sum().backward()
        # a features model's output does not read the pooler: no gradient, as in transformers
        return {k: np.zeros(p.shape, np.float32) if p.grad is None else p.grad.numpy().copy()
                for k, p in model.named_parameters()}  # fmt: skip
    import tensorflow as tf

    table = FAMILY.weight_table(model.zoo_config)
    variables = [keras_layer(keras_layer(model, p.layer), v) for p in table for v in p.variables]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(model(ids, padding_mask=padding, training=True)))
    found = dict(zip(map(id, variables), tape.gradient(loss, variables), strict=True))
    out = {}
    for port in table:
        layer = keras_layer(model, port.layer)
        grads = [_array(found[id(keras_layer(layer, v))], keras_layer(layer, v)) for v in port.variables]
        out.update(zip((s.name for s in port.tensors), port.to_torch(*grads), strict=True))
    return out


def _array(gradient, variable) -> np.ndarray:
    """A Keras gradient as an array: an embedding's sparse rows made dense, none as zeros."""
    import tensorflow as tf

    return (
        np.zeros(variable.shape, np.float32)
        if gradient is None
        else np.asarray(tf.convert_to_tensor(gradient))
    )


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_grad_checkpointing_gives_the_same_gradients(framework):
    config = registry.resolve_config("bert-micro", task="masked_language_modeling", vocab_size=40,
                                     hidden_dropout=0.0, attention_dropout=0.0)  # fmt: skip
    ids = config.example_input(3, seed=4)
    padding = np.zeros(ids.shape, dtype=bool)
    padding[1, 5:] = True
    torch.manual_seed(0)
    model = FAMILY.build_torch(config) if framework == "lightning" else FAMILY.build_keras(config)
    plain = _gradients(model, framework, ids, padding)
    checkpointed = _gradients(model, framework, ids, padding, checkpointing=True)
    assert plain.keys() == checkpointed.keys() == set(tensor_specs(FAMILY.weight_table(config)))
    assert max(float(np.max(np.abs(plain[k] - checkpointed[k]))) for k in plain) <= 1e-6
    assert max(float(np.max(np.abs(g))) for g in plain.values()) > 1e-3


def test_the_twins_agree_on_gradients_and_the_padding_row_gets_none_from_the_lookup():
    """Both twins' gradients agree; the padding token's embedding row gets no gradient through
    the lookup (torch's padding_idx; the Keras twin stops it) in a features model, where nothing
    else reads that row."""
    config = registry.resolve_config("bert-micro", vocab_size=40, hidden_dropout=0.0, attention_dropout=0.0)
    ids = config.example_input(3, seed=4)
    ids[:, -2:] = config.pad_token_id
    padding = ids == config.pad_token_id
    torch_model = _randomised(config)
    keras_model = FAMILY.build_keras(config)
    tensors_to_keras(keras_model, FAMILY.weight_table(config), model_tensors(torch_model))
    torch_grads = _gradients(torch_model, "lightning", ids, padding)
    keras_grads = _gradients(keras_model, "keras", ids, padding)
    for grads in (torch_grads, keras_grads):
        assert not grads["embeddings.word.weight"][config.pad_token_id].any()
    scale = max(float(np.max(np.abs(g))) for g in torch_grads.values())
    assert max(float(np.max(np.abs(torch_grads[k] - keras_grads[k]))) for k in torch_grads) <= 1e-5 * scale
