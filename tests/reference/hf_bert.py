"""transformers' BERT as the bert family's oracle (run in the reference environment).

``hf_bert.py OUT`` writes, for the tests in zoo's environment:

- ``counts.json``: parameters of transformers' ``BertModel`` at the shapes of zoo's presets
  (``parameters()`` counts a tied tensor once), and of bert-base's heads;
- for each case below, a model built from ``BertConfig(...)``, seeded, with every LayerNorm
  weight and bias and every bias randomised, and weights scaled so that attention is far from
  uniform (a near-uniform softmax hides a mixed-up head or token order), saved in ``OUT/CASE``;
  ``CASE-inputs.npz`` (``ids``, ``attention_mask`` with padding at the end of every row but
  the first, ``token_type_ids`` with a second segment in every row) and, in eval mode,
  ``CASE-hidden.npy`` (last hidden state), ``CASE-pooled.npy`` (pooler output, where the class
  has a pooler) and ``CASE-logits.npy`` (the head's logits, where it has a head).

  ``base``: BertModel at bert-base's shape (12 x 768), ``save_pretrained`` (no prefix, as
  sentence-transformers saves it); ``cls``: BertForSequenceClassification, 4 x 256, 3 labels;
  ``token``: BertForTokenClassification, 2 x 128, 5 labels, 3 token types; ``mlm``:
  BertForMaskedLM, 3 x 96 with 3 heads of 32 (not BERT's 64: only config.json says so);
  ``prefixed``: a BertModel state dict with the ``bert.`` prefix, weights alone (no
  config.json); ``old``: a BertForPreTraining saved as an old ``pytorch_model.bin``: LayerNorm
  ``gamma``/``beta``, the ``position_ids`` buffer, the tied decoder written out, the pooler and
  the next-sentence head, with ``architectures: [BertForMaskedLM]`` as bert-base-uncased has;
  its logits are the masked-LM head's.

``hf_bert.py OUT exported ROOT`` loads every model zoo exported under ROOT/<name>/ with the class
its ``config.json`` names (``from_pretrained(..., output_loading_info=True)``), writes its
outputs on ``ROOT/inputs.npz`` (``<name>.npy``: the last hidden state for a BertModel, else the
logits) and, in ``loaded.json``, the loading info (missing, unexpected and mismatched keys) and
whether the MLM decoder is tied to the word embedding.
"""

import json
import sys
from pathlib import Path

import numpy as np
import shim  # noqa: F401  (before transformers)
import torch
import transformers
from safetensors.torch import save_file
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)

SEED = 0
PRESETS = {  # zoo's preset: (layers, width, heads, intermediate)
    "bert-tiny": (2, 128, 2, 512),
    "bert-mini": (4, 256, 4, 1024),
    "bert-small": (4, 512, 8, 2048),
    "bert-minilm-l6": (6, 384, 12, 1536),
    "bert-base": (12, 768, 12, 3072),
}
CASES = {  # case: (class, BertConfig fields, batch, steps)
    "base": (BertModel, {}, 2, 8),
    "cls": (
        BertForSequenceClassification,
        dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024,
             vocab_size=1000, num_labels=3),
        3,
        12,
    ),
    "token": (
        BertForTokenClassification,
        dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512,
             vocab_size=700, num_labels=5, type_vocab_size=3, max_position_embeddings=64),
        3,
        16,
    ),
    "mlm": (
        BertForMaskedLM,
        dict(num_hidden_layers=3, hidden_size=96, num_attention_heads=3, intermediate_size=200,
             vocab_size=500, max_position_embeddings=40),
        3,
        10,
    ),
    "prefixed": (
        BertModel,
        dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=256,
             vocab_size=300),
        2,
        9,
    ),
    "old": (
        BertForPreTraining,
        dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=1, intermediate_size=128,
             vocab_size=200, max_position_embeddings=32),
        2,
        7,
    ),
}  # fmt: skip


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def randomise(model: torch.nn.Module, generator: torch.Generator) -> None:
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=generator)
        if "LayerNorm" in name:
            p.copy_(1.0 + 0.2 * noise if name.endswith("weight") else 0.1 * noise)
        elif name.endswith("bias"):
            p.copy_(0.1 * noise)
        elif "embeddings" in name:
            p.copy_(0.5 * noise)
        elif p.ndim == 2:  # a Linear: N(0, 1 / fan_in), attention far from uniform
            p.copy_(noise / p.shape[1] ** 0.5)


def inputs(rng: np.random.Generator, vocab: int, types: int, batch: int, steps: int) -> dict[str, np.ndarray]:
    ids = rng.integers(1, vocab, size=(batch, steps), dtype=np.int64)
    attention = np.ones((batch, steps), dtype=np.int64)
    token_types = np.zeros((batch, steps), dtype=np.int64)
    for row in range(batch):
        length = steps - 3 * row if row else steps  # the first row unpadded, the others padded at the end
        attention[row, length:] = 0
        ids[row, length:] = 0  # the pad token
        token_types[row, length // 2 : length] = rng.integers(1, types) if types > 1 else 0
    return {"ids": ids, "attention_mask": attention, "token_type_ids": token_types}


def old_name(key: str) -> str:
    """The LayerNorm names of BERT files converted from Google's TensorFlow checkpoints."""
    return key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")


def fixtures(out: Path) -> None:
    counts = {}
    for preset, (layers, width, heads, inner) in PRESETS.items():
        config = BertConfig(num_hidden_layers=layers, hidden_size=width, num_attention_heads=heads,
                            intermediate_size=inner)  # fmt: skip
        counts[preset] = count(BertModel(config))
    base = BertConfig()
    for cls in (BertForSequenceClassification, BertForTokenClassification, BertForMaskedLM):
        counts[f"bert-base-{cls.__name__}"] = count(cls(base))
    (out / "counts.json").write_text(json.dumps(counts, indent=1))

    generator = torch.Generator().manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    for case, (cls, fields, batch, steps) in CASES.items():
        torch.manual_seed(SEED)
        config = BertConfig(**fields)
        model = cls(config).eval()
        randomise(model, generator)
        x = inputs(rng, config.vocab_size, config.type_vocab_size, batch, steps)
        np.savez(out / f"{case}-inputs.npz", **x)
        tensors = {
            "input_ids": torch.from_numpy(x["ids"]),
            "attention_mask": torch.from_numpy(x["attention_mask"]),
            "token_type_ids": torch.from_numpy(x["token_type_ids"]),
        }
        with torch.no_grad():
            found = model(**tensors, output_hidden_states=True)
        hidden = found.last_hidden_state if cls is BertModel else found.hidden_states[-1]
        np.save(out / f"{case}-hidden.npy", hidden.numpy())
        if cls is BertModel:
            np.save(out / f"{case}-pooled.npy", found.pooler_output.numpy())
        elif cls is BertForPreTraining:
            np.save(out / f"{case}-logits.npy", found.prediction_logits.numpy())
        else:
            np.save(out / f"{case}-logits.npy", found.logits.numpy())
        if cls is BertForSequenceClassification:
            with torch.no_grad():
                pooled = model.bert(**tensors).pooler_output
            np.save(out / f"{case}-pooled.npy", pooled.numpy())
        folder = out / case
        if case == "prefixed":
            folder.mkdir()
            state = {f"bert.{k}": v.contiguous() for k, v in model.state_dict().items()}
            save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
        elif case == "old":
            folder.mkdir()
            state = dict(model.state_dict())  # the tied decoder weight and bias under their own names
            state["bert.embeddings.position_ids"] = torch.arange(config.max_position_embeddings)[None]
            state = {old_name(k): v.clone() for k, v in state.items()}
            torch.save(state, folder / "pytorch_model.bin")
            config.architectures = ["BertForMaskedLM"]
            config.save_pretrained(folder)
        else:
            model.save_pretrained(folder)


def exported(out: Path, root: str) -> None:
    x = {k: torch.from_numpy(v) for k, v in np.load(Path(root) / "inputs.npz").items()}
    loaded = {}
    for folder in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        config = json.loads((folder / "config.json").read_text())
        cls = getattr(transformers, config["architectures"][0])
        model, info = cls.from_pretrained(folder, output_loading_info=True)
        model.eval()
        with torch.no_grad():
            found = model(
                input_ids=x["ids"], attention_mask=x["attention_mask"], token_type_ids=x["token_type_ids"]
            )
        value = found.last_hidden_state if cls is BertModel else found.logits
        np.save(out / f"{folder.name}.npy", value.numpy())
        entry = {key: sorted(map(str, info.get(key) or ())) for key in ("missing_keys", "unexpected_keys",
                 "mismatched_keys", "error_msgs")}  # fmt: skip
        if getattr(model.config, "id2label", None) and cls in (
            BertForSequenceClassification,
            BertForTokenClassification,
        ):
            entry["id2label"] = {str(k): v for k, v in model.config.id2label.items()}
        if cls is BertForMaskedLM:
            decoder = model.cls.predictions.decoder.weight
            entry["tied"] = decoder.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()
        loaded[folder.name] = entry
    (out / "loaded.json").write_text(json.dumps(loaded, indent=1))


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    if len(sys.argv) > 2 and sys.argv[2] == "exported":
        exported(target, sys.argv[3])
    else:
        fixtures(target)
