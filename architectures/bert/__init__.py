"""BERT family: transformers' ``BertModel`` and its sequence / token classification and masked-LM
heads, exactly, in both frameworks."""

from architectures.bert.config import BertConfig
from architectures.bert.presets import ALIASES, PRESETS
from architectures.bert.weights import table
from zoo.checkpoint.foreign import ForeignFormat
from zoo.family import Family, InputSpec

FAMILY = Family(
    name="bert",
    description="BERT (transformers' BertModel): token + position + segment embeddings, post-norm blocks, "
    "pooler; features, sequence and token classification, masked LM with a tied decoder; imports and "
    "exports transformers weights.",
    config=BertConfig,
    inputs=InputSpec("tokens", padding_mask=True),
    tasks=("features", "classification", "token_classification", "masked_language_modeling"),
    weight_table=table,
    torch_model="architectures.bert.torch_model:build",
    keras_model="architectures.bert.keras_model:build",
    grad_checkpointing=("lightning", "keras"),
    lora_targets=("attn.q", "attn.k", "attn.v", "attn.out_proj"),
    presets=PRESETS,
    aliases=ALIASES,
    formats=(
        ForeignFormat(
            "hf",
            "transformers' BertModel (with a 'bert.' prefix or without, as sentence-transformers saves it), "
            "BertForMaskedLM, BertForSequenceClassification and BertForTokenClassification, with config.json",
            to_zoo="architectures.bert.formats:from_hf",
            from_zoo="architectures.bert.formats:to_hf",
            preprocessing="architectures.bert.formats:hf_preprocessing",
        ),
    ),
)
