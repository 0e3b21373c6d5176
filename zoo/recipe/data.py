"""The recipe's ``data`` section: one pydantic class per data source (the union on ``name`` is
``zoo.recipe.schema.DataConfig``). Here: what every section and every source shares, and the
sources of arrays and text; images are :mod:`zoo.recipe.image_data`'s, streamed files
:mod:`zoo.recipe.stream_data`'s.

Validation checks the fields and that named files and folders exist; reading the data is
:mod:`zoo.data`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveInt,
    model_validator,
)

from zoo.limits import MAX_VOCAB_SIZE


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


class DataBase(Section):
    batch_size: PositiveInt = Field(64, description="Training batch size (global, across devices).")
    eval_batch_size: PositiveInt = Field(512, description="Batch size for validation and test.")
    shuffle: bool = Field(True, description="Reshuffle the training set every epoch (seeded).")


class DigitsData(DataBase):
    """The 8x8 digits that scikit-learn ships (1,797 images, 10 classes), scaled to [0, 1]."""

    name: Literal["digits"] = "digits"
    val_fraction: float = Field(0.1, ge=0, lt=0.5, description="Share of the data held out for validation.")
    test_fraction: float = Field(0.2, gt=0, lt=0.5, description="Share of the data held out for testing.")
    split_seed: int = Field(0, description="Seed of the fixed stratified split (not the training seed).")
    classes: list[Annotated[int, Field(ge=0, le=9)]] | None = Field(
        None, min_length=2, description="Keep only these digits, relabelled 0..k-1 in this order (transfer)."
    )
    train_per_class: PositiveInt | None = Field(
        None, description="Keep only this many training samples of each class (few-shot fine-tuning)."
    )

    @model_validator(mode="after")
    def _distinct(self):
        if self.classes is not None and len(set(self.classes)) != len(self.classes):
            raise ValueError(f"data.classes {self.classes} names a digit twice")
        return self


class NpzData(DataBase):
    """A user's ``.npz``: ``x_train``, ``y_train``, ``x_test``, ``y_test`` (and optionally
    ``x_val``, ``y_val``). Images are (N, H, W) or (N, C, H, W); sequences (N, T, F)."""

    name: Literal["npz"] = "npz"
    path: Path = Field(description="Path of the .npz file.")
    val_fraction: float = Field(
        0.1,
        ge=0,
        lt=0.5,
        description="Held out from the training arrays when the file has no x_val.",
    )
    split_seed: int = Field(0, description="Seed of the validation split taken from the training arrays.")

    @model_validator(mode="after")
    def _exists(self):
        if not self.path.is_file():
            raise ValueError(f"data.path {str(self.path)!r} is not a file; give the path of an .npz")
        return self


def tokenizer_spec(value: str) -> str:
    """``data.tokenizer``: 'char', 'bpe' or a path that exists (read when the data loads)."""
    if value in ("char", "bpe"):
        return value
    if not Path(value).exists():
        raise ValueError(
            f"data.tokenizer {value!r} is neither 'char', 'bpe' nor an existing path; give a "
            "tokenizer.json, a vocab.txt, a folder with vocab.json + merges.txt, 'bpe' (train a "
            "byte-level BPE on the data) or 'char'"
        )
    return value


class Tokenized(DataBase):
    """How text becomes token ids: the recipe's tokenizer (a checkpoint's, when fine-tuning)."""

    tokenizer: Annotated[str, AfterValidator(tokenizer_spec)] = Field(
        "char",
        description="'char' (one id per character of the text), 'bpe' (a byte-level BPE trained on "
        "the training text, cached), or a path: tokenizer.json, a WordPiece vocab.txt, or a folder "
        "with GPT-2's vocab.json + merges.txt (or any of these). Fine-tuning uses the checkpoint's.",
    )
    bpe_vocab_size: int = Field(
        2048, ge=262, le=MAX_VOCAB_SIZE, description="Tokens of the BPE that tokenizer: 'bpe' trains."
    )
    lowercase: bool | None = Field(
        None, description="Lower-case text before a WordPiece vocab.txt (default true, as uncased BERT)."
    )

    @model_validator(mode="after")
    def _lowercase_for_wordpiece(self):
        if self.lowercase is not None and not self.tokenizer.endswith(".txt"):
            raise ValueError(
                f"data.lowercase applies to a WordPiece vocab.txt only, not tokenizer {self.tokenizer!r}; "
                "remove data.lowercase"
            )
        return self


MLM_PROBABILITY = 0.15  # BERT's share of predicted tokens


class TextData(Tokenized):
    """Text for language modeling, tokenized and packed into blocks: Python's own documentation
    (``pydoc_data.topics``, on every Python install), a UTF-8 file, or a folder of .txt files."""

    name: Literal["text"] = "text"
    path: Path | None = Field(
        None, description="A UTF-8 text file or a folder of .txt files; None uses the embedded Python docs."
    )
    task: Literal["language_modeling", "masked_language_modeling"] = Field(
        "language_modeling",
        description="Next-token prediction (blocks of seq_len + 1 tokens), or masked language "
        "modeling (blocks of seq_len, tokens masked per batch from the seeded batch order).",
    )
    seq_len: int = Field(128, ge=2, le=8192, description="Tokens per training window.")
    mlm_probability: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Masked language modeling: share of tokens predicted (80/10/10); default 0.15.",
    )
    val_fraction: float = Field(
        0.05, ge=0, lt=0.5, description="Share of the text (by position) for validation."
    )
    test_fraction: float = Field(0.05, gt=0, lt=0.5, description="Share of the text (its end) for testing.")

    @model_validator(mode="after")
    def _exists(self):
        if self.path is not None and not (self.path.is_file() or self.path.is_dir()):
            raise ValueError(
                f"data.path {str(self.path)!r} is neither a file nor a folder; give a UTF-8 text file, "
                "a folder of .txt files, or null"
            )
        if self.task != "masked_language_modeling":
            if self.mlm_probability is not None:
                raise ValueError(
                    "data.mlm_probability is set but data.task is not masked_language_modeling; "
                    "remove it or set data.task: masked_language_modeling"
                )
        elif self.mlm_probability is None:
            self.mlm_probability = MLM_PROBABILITY
        return self


class TextClassificationData(Tokenized):
    """Labelled text: a CSV or JSONL file with a text column (optionally a second one: sentence
    pairs) and a label column; or, without a file, paragraphs of Python's documentation labelled
    with the part of the language reference they come from. Padded to the longest example."""

    name: Literal["text_classification"] = "text_classification"
    path: Path | None = Field(
        None,
        description="A .csv (header row) or .jsonl (one object a line) file; None: the embedded "
        "Python-docs topics.",
    )
    tokenizer: Annotated[str, AfterValidator(tokenizer_spec)] = Field(
        "bpe", description=Tokenized.model_fields["tokenizer"].description
    )
    text_column: str = Field("text", min_length=1, description="The column of the text.")
    text_pair_column: str | None = Field(
        None, min_length=1, description="A second text column (sentence pairs: token types 0 and 1)."
    )
    label_column: str = Field("label", min_length=1, description="The column of the label.")
    max_length: int = Field(
        128,
        ge=4,
        le=8192,
        description="Longest tokenized example (special tokens included); longer "
        "ones are truncated and counted.",
    )
    val_fraction: float = Field(0.1, ge=0, lt=0.5, description="Share of the examples for validation.")
    test_fraction: float = Field(0.1, gt=0, lt=0.5, description="Share of the examples for testing.")
    split_seed: int = Field(0, description="Seed of the split into train/val/test (not the training seed).")

    @model_validator(mode="after")
    def _consistent(self):
        if self.path is not None:
            if not self.path.is_file():
                raise ValueError(f"data.path {str(self.path)!r} is not a file; give a .csv or .jsonl file")
            if self.path.suffix.lower() not in (".csv", ".jsonl", ".ndjson"):
                raise ValueError(
                    f"data.path {str(self.path)!r}: zoo reads .csv (with a header row) or .jsonl (one "
                    "JSON object a line) labelled text"
                )
        columns = [self.text_column, self.text_pair_column, self.label_column]
        named = [c for c in columns if c is not None]
        if len(set(named)) != len(named):
            raise ValueError(f"data text/label columns {named} name a column twice")
        return self


def default_tag(tag: str):
    """A section without ``name`` is the default variant, so ``--set data.batch_size=8`` works."""

    def fill(value: Any) -> Any:
        return {"name": tag, **value} if isinstance(value, dict) else value

    return BeforeValidator(fill)
