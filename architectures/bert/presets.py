"""Named BERT configs: Google's bert-base and the small shapes of its "Well-Read Students" table
(Turc et al. 2019: L layers, width H, H/64 heads, 4H feed-forward), the shape of
sentence-transformers' all-MiniLM-L6-v2, and a micro one for tests. Only the architecture is
fixed here; the task, vocabulary and class count come from the data (the counts shown are
``BertModel``'s, pooler included, at transformers' default vocabulary of 30,522 tokens)."""

from zoo.family import Preset

_HEADS = (
    "Heads: sequence classification adds (H + 1) x classes; token classification the same but drops "
    "the pooler (H^2 + H); masked LM adds H^2 + 3H + vocab (its decoder is the word embedding) and "
    "drops the pooler."
)


def _shape(layers: int, width: int, heads: int | None = None, intermediate: int | None = None) -> dict:
    return {
        "num_layers": layers,
        "hidden_size": width,
        "num_heads": heads or width // 64,
        "intermediate_size": intermediate or 4 * width,
    }


PRESETS = (
    Preset(
        "bert-micro",
        "2 blocks, H 32, 2 heads, feed-forward 64, 64 positions: quick runs and tests. " + _HEADS,
        {**_shape(2, 32, 2, 64), "max_len": 64},
    ),
    Preset(
        "bert-tiny",
        "Google's BERT-Tiny shape (L=2, H=128, A=2, feed-forward 512). " + _HEADS,
        _shape(2, 128),
    ),
    Preset(
        "bert-mini",
        "Google's BERT-Mini shape (L=4, H=256, A=4, feed-forward 1024). " + _HEADS,
        _shape(4, 256),
    ),
    Preset(
        "bert-small",
        "Google's BERT-Small shape (L=4, H=512, A=8, feed-forward 2048). " + _HEADS,
        _shape(4, 512),
    ),
    Preset(
        "bert-minilm-l6",
        "The shape of sentence-transformers' all-MiniLM-L6-v2 (L=6, H=384, A=12, feed-forward 1536): "
        "a BertModel read by mean pooling. " + _HEADS,
        _shape(6, 384, 12),
    ),
    Preset(
        "bert-base",
        "Google's bert-base (L=12, H=768, A=12, feed-forward 3072, 512 positions): 109,482,240 "
        "parameters as BertModel. " + _HEADS,
        _shape(12, 768),
    ),
)

# transformers' hub names of these shapes at the uncased 30,522-token vocabulary (the cased
# models' vocabulary differs, so they are no alias).
ALIASES = {
    "bert-base-uncased": "bert-base",
    "google-bert/bert-base-uncased": "bert-base",
    "google/bert_uncased_L-2_H-128_A-2": "bert-tiny",
    "google/bert_uncased_L-4_H-256_A-4": "bert-mini",
    "google/bert_uncased_L-4_H-512_A-8": "bert-small",
    "sentence-transformers/all-MiniLM-L6-v2": "bert-minilm-l6",
}
