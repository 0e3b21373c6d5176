"""The recipe's ``stream`` source: files larger than memory (Parquet, JSONL, CSV, text, a
``save_to_disk`` folder), named by path, folder or glob pattern, of text or images."""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from zoo.recipe.data import MLM_PROBABILITY, Tokenized, tokenizer_spec
from zoo.recipe.image_data import IMAGE_FIELDS, WORKERS_DESCRIPTION, ImageInput


def _listed(value: Any) -> Any:
    """One path or a list of them."""
    return [value] if isinstance(value, str | Path) else value


def _entries_exist(entries: list[str], field: str) -> None:
    """Each entry a file, a folder or a glob pattern that matches files (read later, by zoo.data)."""
    for entry in entries:
        if not (Path(entry).exists() or glob.glob(entry, recursive=True)):
            raise ValueError(
                f"{field} {entry!r} is neither a file, a folder nor a pattern that matches files; give "
                "Parquet, JSONL, CSV, .txt or Arrow files, folders of them, glob patterns, or a "
                "save_to_disk folder"
            )


Entries = Annotated[list[Annotated[str, Field(min_length=1)]], BeforeValidator(_listed)]
LM_TASKS = ("language_modeling", "masked_language_modeling")


class StreamData(Tokenized, ImageInput):
    """Files larger than memory, streamed: Parquet, JSONL, CSV and text shards, or a Hugging
    Face ``save_to_disk`` folder. Indexed once (cached), then read in one seeded order (shards
    shuffled, records mixed in a bounded buffer) by a torch DataLoader and by tf.data alike;
    the data position is part of the training state."""

    name: Literal["stream"] = "stream"
    path: Entries = Field(
        min_length=1,
        description="The training files: files, folders of them (searched recursively), glob "
        "patterns, or a save_to_disk folder (a DatasetDict's also gives its validation and test splits).",
    )
    validation: Entries | None = Field(None, description="Validation files; None: carved from path.")
    test: Entries | None = Field(None, description="Test files; None: carved from path.")
    task: Literal["classification", "language_modeling", "masked_language_modeling"] = Field(
        "language_modeling",
        description="Labelled images or texts, next-token prediction over documents packed into "
        "blocks, or masked language modeling.",
    )
    tokenizer: Annotated[str, AfterValidator(tokenizer_spec)] = Field(
        "bpe",
        description="As for text: 'bpe' trains a byte-level BPE on the first 16 MiB of training "
        "text; 'char' takes the characters the index pass finds; or a tokenizer path.",
    )
    text_column: str = Field("text", min_length=1, description="The column of the text.")
    text_pair_column: str | None = Field(
        None, min_length=1, description="Classification: a second text column (sentence pairs)."
    )
    label_column: str = Field("label", min_length=1, description="Classification: the column of the label.")
    image_column: str | None = Field(
        None,
        min_length=1,
        description="Classification of images: the column holding each image's path (relative to "
        "its file's folder) or bytes (a Hugging Face Image feature's {bytes, path} too).",
    )
    seq_len: int | None = Field(None, ge=2, le=8192, description="Language modeling: tokens a block (128).")
    mlm_probability: float | None = Field(
        None, gt=0, lt=1, description="Masked language modeling: share of tokens predicted (0.15)."
    )
    max_length: int | None = Field(
        None, ge=4, le=8192, description="Text classification: tokens an example is padded or cut to (128)."
    )
    shuffle_buffer: int = Field(
        10_000,
        ge=0,
        le=10_000_000,
        description="Records mixed at once: each record read takes a random one's place in the "
        "buffer, which goes to training. Memory holds this many records per reader; 0: shards "
        "shuffled, records in file order.",
    )
    on_bad_record: Literal["error", "skip"] = Field(
        "error",
        description="A record that cannot be used (a line that is not JSON, a missing column, an "
        "unreadable image, a file cut short) stops the index pass naming its file and row, or is "
        "left out of every epoch and counted.",
    )
    check_images: Literal["header", "decode"] = Field(
        "header",
        description="How the index pass checks each image: 'header' opens it; 'decode' decodes it "
        "(slow; also finds truncated files).",
    )
    val_fraction: float = Field(
        0.05, ge=0, lt=0.5, description="Without validation files: the share at the end of every file."
    )
    test_fraction: float = Field(
        0.05, ge=0, lt=0.5, description="Without test files: the share after the validation share."
    )
    workers: int | None = Field(None, ge=0, description=WORKERS_DESCRIPTION)

    @model_validator(mode="after")
    def _consistent(self):
        for field in ("path", "validation", "test"):
            if getattr(self, field) is not None:
                _entries_exist(getattr(self, field), f"data.{field}")
        language = self.task in LM_TASKS
        misplaced = {
            "seq_len": not language,
            "mlm_probability": self.task != "masked_language_modeling",
            "max_length": language or self.image_column is not None,
            "text_pair_column": language or self.image_column is not None,
            "image_column": language,
            **{name: self.image_column is None for name in IMAGE_FIELDS},
        }
        # A value of its own (a written-out recipe carries every field, at its default where unused).
        fields = type(self).model_fields
        wrong = [n for n, bad in misplaced.items() if bad and getattr(self, n) != fields[n].default]
        if wrong:
            kind = "images (data.image_column)" if wrong[0] in IMAGE_FIELDS else "another data.task"
            raise ValueError(f"data.{wrong[0]} does not apply to data.task {self.task!r}; it is for {kind}")
        if language and self.seq_len is None:
            self.seq_len = 128
        if self.task == "masked_language_modeling" and self.mlm_probability is None:
            self.mlm_probability = MLM_PROBABILITY
        if self.task == "classification" and self.image_column is None and self.max_length is None:
            self.max_length = 128
        columns = [self.text_column, self.text_pair_column, self.label_column, self.image_column]
        named = [c for c in columns if c is not None] if self.task == "classification" else []
        if len(set(named)) != len(named):
            raise ValueError(f"data columns {named} name a column twice")
        return self
