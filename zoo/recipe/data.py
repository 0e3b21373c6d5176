"""The recipe's ``data`` section: one pydantic class per data source, a union on ``name``.

Validation checks the fields and that named files and folders exist; reading the data is
:mod:`zoo.data`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from zoo.limits import MAX_VOCAB_SIZE
from zoo.preprocessing import IMAGENET_MEAN, IMAGENET_STD, Interpolation


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


# ------------------------------------------------------------------------------ data


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


def _tokenizer_spec(value: str) -> str:
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

    tokenizer: Annotated[str, AfterValidator(_tokenizer_spec)] = Field(
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
    tokenizer: Annotated[str, AfterValidator(_tokenizer_spec)] = Field(
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


def _switch(value: Any) -> Any:
    """``augment: true`` is every default augmentation; ``false`` is none."""
    if value is True:
        return {}
    return None if value is False else value


class Augmentation(Section):
    """Training-time augmentation, torchvision's ImageNet recipe: ``RandomResizedCrop`` then
    ``RandomHorizontalFlip``. Drawn per sample from (trainer.seed, epoch, sample index), the
    same in both frameworks; validation and test images get the eval transform."""

    random_resized_crop: bool = Field(
        True,
        description="Crop a random area and aspect ratio of the image, resized to image_size; "
        "false: the eval transform (resize, centre crop).",
    )
    scale: tuple[Annotated[float, Field(gt=0, le=1)], Annotated[float, Field(gt=0, le=1)]] = Field(
        (0.08, 1.0), description="Range of the crop's area, as a share of the image's."
    )
    ratio: tuple[PositiveFloat, PositiveFloat] = Field(
        (3 / 4, 4 / 3), description="Range of the crop's aspect ratio (width / height), drawn log-uniformly."
    )
    horizontal_flip: bool = Field(True, description="Mirror half the images left to right.")

    @model_validator(mode="after")
    def _meaningful(self):
        for name in ("scale", "ratio"):
            low, high = getattr(self, name)
            if low > high:
                raise ValueError(
                    f"data.augment.{name} {[low, high]} is not a range: its first value is the larger"
                )
        crop_fields = {"scale", "ratio"} & self.model_fields_set
        if not self.random_resized_crop and crop_fields:
            raise ValueError(
                f"data.augment.{sorted(crop_fields)[0]} is set but data.augment.random_resized_crop is "
                "false; remove it or turn the crop on"
            )
        if not self.random_resized_crop and not self.horizontal_flip:
            raise ValueError("data.augment turns every augmentation off; write augment: null instead")
        return self


class ImageInput(DataBase):
    """How image files become the model's input: the fields an image folder and a streamed
    image set share (:func:`zoo.data.image_folder.pixels_for` reads them)."""

    image_size: PositiveInt = Field(224, description="Side of the square image the model sees.")
    resize: PositiveInt | None = Field(
        None,
        description="Eval transform: the shorter side is resized to this, then the centre "
        "image_size square is cropped (torchvision's Resize + CenterCrop); None: image_size.",
    )
    interpolation: Interpolation = Field(
        "bilinear",
        description="How images are resized (torchvision's InterpolationMode: PIL's filter of that name); "
        "timm's models are trained with bicubic.",
    )
    channels: Literal["rgb", "grayscale"] = Field("rgb", description="Colour images, or one channel.")
    mean: tuple[float, ...] = Field(
        IMAGENET_MEAN,
        description="Per-channel mean subtracted from pixels in [0, 1]; default ImageNet's "
        "(for grayscale, the average of its three).",
    )
    std: tuple[PositiveFloat, ...] = Field(
        IMAGENET_STD, description="Per-channel standard deviation divided by; default ImageNet's."
    )
    augment: Annotated[Augmentation | None, BeforeValidator(_switch)] = Field(
        None, description="Training augmentation (true: the defaults); null: none."
    )

    @model_validator(mode="before")
    @classmethod
    def _grayscale_defaults(cls, raw: Any) -> Any:
        """Grayscale without its own mean/std takes the average of ImageNet's three channels."""
        if isinstance(raw, dict) and raw.get("channels") == "grayscale":
            for key, rgb in (("mean", IMAGENET_MEAN), ("std", IMAGENET_STD)):
                if raw.get(key) is None:
                    raw = {**raw, key: (round(sum(rgb) / 3, 4),)}
        return raw

    @model_validator(mode="after")
    def _pixels_consistent(self):
        if self.resize is not None and self.resize < self.image_size:
            raise ValueError(
                f"data.resize {self.resize} is smaller than data.image_size {self.image_size}; the "
                "centre crop must fit in the resized image (ImageNet's eval: resize 256, image_size 224)"
            )
        channels = 1 if self.channels == "grayscale" else 3
        for name in ("mean", "std"):
            if len(getattr(self, name)) != channels:
                raise ValueError(
                    f"data.{name} has {len(getattr(self, name))} value(s) but data.channels "
                    f"{self.channels!r} has {channels}"
                )
        return self


IMAGE_FIELDS = tuple(ImageInput.model_fields.keys() - DataBase.model_fields.keys())
WORKERS_DESCRIPTION = (
    "Decoding processes (torch DataLoader workers) and parallel map calls (tf.data); "
    "0 decodes in the training process; None: the CPU count, at most 8."
)


class ImageFolderData(ImageInput):
    """Image files in class folders: ``root/<class>/<image>`` (torchvision's ImageFolder, Keras'
    image_dataset_from_directory), or ``root/train/<class>/...`` with optional ``val/`` and
    ``test/``. Classes sorted by name are the label ids; JPEG and PNG files are decoded batch by
    batch, identically in both frameworks."""

    name: Literal["image_folder"] = "image_folder"
    root: Path | None = Field(
        None,
        description="The folder of class folders (or of train/, val/, test/ folders); null: the "
        "embedded digits, written once as image_size PNGs into ~/.cache/zoo (offline).",
    )
    classes: list[str] | None = Field(
        None, min_length=2, description="Keep only these class folders, label ids in this order (transfer)."
    )
    train_per_class: PositiveInt | None = Field(
        None, description="Keep only this many training images of each class (few-shot fine-tuning)."
    )
    val_fraction: float = Field(
        0.1, ge=0, lt=0.5, description="Share of each class carved from train for validation, without val/."
    )
    test_fraction: float = Field(
        0.1, ge=0, lt=0.5, description="Share of each class carved from train for testing, without test/."
    )
    split_seed: int = Field(0, description="Seed of the carved splits (not the training seed).")
    check_files: Literal["header", "decode"] = Field(
        "header",
        description="How every file is checked when the folder is read: 'header' opens it (fast); "
        "'decode' decodes every pixel once (slow, also finds truncated files).",
    )
    on_bad_file: Literal["error", "skip"] = Field(
        "error",
        description="A file that fails the check stops the load naming it, or is left out and counted.",
    )
    workers: int | None = Field(None, ge=0, description=WORKERS_DESCRIPTION)

    @model_validator(mode="after")
    def _consistent(self):
        if self.classes is not None and len(set(self.classes)) != len(self.classes):
            raise ValueError(f"data.classes {self.classes} names a class twice")
        if self.root is not None and not self.root.is_dir():
            raise ValueError(
                f"data.root {str(self.root)!r} is not a folder; give the folder of class folders "
                "(root/<class>/<image>)"
            )
        return self


def _listed(value: Any) -> Any:
    """One path or a list of them."""
    return [value] if isinstance(value, str | Path) else value


def _entries_exist(entries: list[str], field: str) -> None:
    """Each entry a file, a folder or a glob pattern that matches files (read later, by zoo.data)."""
    import glob

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
    tokenizer: Annotated[str, AfterValidator(_tokenizer_spec)] = Field(
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


def default_tag(tag: str):
    """A section without ``name`` is the default variant, so ``--set data.batch_size=8`` works."""

    def fill(value: Any) -> Any:
        return {"name": tag, **value} if isinstance(value, dict) else value

    return BeforeValidator(fill)


DataConfig = Annotated[
    Union[DigitsData, NpzData, TextData, TextClassificationData, ImageFolderData, StreamData],  # noqa: UP007
    Field(discriminator="name"),
    default_tag("digits"),
]
