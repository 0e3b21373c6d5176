"""Tokenizers: a user's Hugging Face files, a byte-level BPE trained here, or characters.

Every kind is one :class:`Tokenizer` around a Hugging Face ``tokenizers.Tokenizer``, so one
``tokenizer.json`` describes any of them and travels with a checkpoint (next to its
``model.safetensors``). The character vocabulary of zoo's first language models is a
``WordLevel`` model over single characters: the same file format, with a fast encoder of
its own (a lookup per character, and an error naming the characters it lacks).

Nothing here imports torch or TensorFlow.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from zoo.cache_dir import cache_dir
from zoo.errors import DataError

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"  # transformers' settings: the special tokens' roles
# Names of the special tokens in the conventions zoo meets: BERT's, RoBERTa's, GPT-2's.
SPECIAL_NAMES: dict[str, tuple[str, ...]] = {
    "pad": ("[PAD]", "<pad>", "<|padding|>"),
    "cls": ("[CLS]", "<s>"),
    "sep": ("[SEP]", "</s>"),
    "mask": ("[MASK]", "<mask>"),
    "unk": ("[UNK]", "<unk>"),
    "eos": ("<|endoftext|>", "</s>"),
}
# What ``zoo tokenizer train`` adds by default: BERT's tokens and GPT-2's end of text, so one
# tokenizer serves a causal LM, a classifier (CLS/SEP/PAD) and masked language modeling. [PAD]
# is id 0, as in BERT's vocab.txt (BERT's default pad_token_id).
DEFAULT_SPECIAL_TOKENS = ("[PAD]", "<|endoftext|>", "[CLS]", "[SEP]", "[MASK]")


class TokenizerError(DataError):
    """A tokenizer file or setting that cannot be used, or text it cannot encode; the message
    says what would work."""


class Tokenizer:
    """Text <-> token ids. ``encode`` adds no special tokens: the data decides where [CLS] and
    [SEP] go (:meth:`encode_for_classification`)."""

    def __init__(self, backend, source: str = ""):
        self.backend = backend  # tokenizers.Tokenizer
        self.source = source  # where it came from, for messages

    # ---------------------------------------------------------------- encode / decode

    def encode(self, text: str) -> list[int]:
        try:
            return self.backend.encode(text, add_special_tokens=False).ids
        except Exception as error:  # tokenizers raises a bare Exception (a WordLevel without [UNK])
            raise TokenizerError(f"{self.source or 'the tokenizer'} cannot encode it: {error}") from None

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Many texts at once (Hugging Face encodes them in parallel)."""
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def counts(self, texts: Sequence[str]) -> np.ndarray:
        """The number of tokens of each text (what an index of a corpus needs): Hugging Face
        encodes the batch on every core, and no id list is made."""
        encoded = self.backend.encode_batch(list(texts), add_special_tokens=False)
        return np.fromiter(map(len, encoded), dtype=np.int64, count=len(texts))

    def decode(self, ids: Iterable[int]) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=False)

    def encode_for_classification(self, first: list[int], second: list[int] | None = None):
        """``[CLS] first [SEP] (second [SEP])`` where the tokenizer has those tokens (BERT's
        layout), the segments as they are otherwise; returns (ids, token types 0/1)."""
        cls, sep = self.cls_id, self.sep_id
        head = [cls] if cls is not None else []
        tail = [sep] if sep is not None else []
        ids = head + first + tail
        types = [0] * len(ids)
        if second is not None:
            ids += second + tail
            types += [1] * (len(second) + len(tail))
        return ids, types

    # ---------------------------------------------------------------- vocabulary

    @property
    def kind(self) -> str:
        """ "char", "bpe", "wordpiece", "unigram" or "wordlevel": the model inside."""
        return type(self.backend.model).__name__.lower()

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def special(self, role: str) -> int | None:
        """The id of the ``role`` token ("pad", "cls", "sep", "mask", "unk", "eos"), or None."""
        for name in SPECIAL_NAMES[role]:
            token_id = self.backend.token_to_id(name)
            if token_id is not None:
                return token_id
        return None

    pad_id = property(lambda self: self.special("pad"))
    cls_id = property(lambda self: self.special("cls"))
    sep_id = property(lambda self: self.special("sep"))
    mask_id = property(lambda self: self.special("mask"))
    unk_id = property(lambda self: self.special("unk"))
    eos_id = property(lambda self: self.special("eos"))

    @property
    def padding_id(self) -> int:
        """The id written under padding: [PAD], else end-of-text (GPT-2 has no pad), else 0.
        Padded positions are masked, so its value never reaches a loss."""
        for candidate in (self.pad_id, self.eos_id):
            if candidate is not None:
                return candidate
        return 0

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of every special token (masked language modeling never masks these)."""
        return frozenset(i for i, t in self.backend.get_added_tokens_decoder().items() if t.special)

    # ---------------------------------------------------------------- files

    def to_json(self) -> str:
        return self.backend.to_str()

    def fingerprint(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/tokenizer.json`` atomically (temporary file, fsync, rename)."""
        return write_atomically(Path(directory) / TOKENIZER_FILE, self.to_json())

    @classmethod
    def load(cls, path: str | Path, lowercase: bool | None = None) -> Tokenizer:
        return load_tokenizer(path, lowercase)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(kind={self.kind!r}, vocab_size={self.vocab_size}, source={self.source!r})"
        )


class CharTokenizer(Tokenizer):
    """One id per character, in the order of ``vocab`` (a checkpoint's ``task_info.vocab``)."""

    def __init__(self, vocab: str, source: str = "characters"):
        if len(set(vocab)) != len(vocab):
            raise TokenizerError("a character vocabulary names a character twice")
        super().__init__(_char_backend(vocab), source)
        self.vocab = vocab
        self.lookup = {c: i for i, c in enumerate(vocab)}

    @classmethod
    def of_text(cls, text: str) -> CharTokenizer:
        """The vocabulary of a text: its characters, sorted (zoo's character LMs)."""
        return cls("".join(sorted(set(text))))

    def extended(self, text: str) -> CharTokenizer:
        """This vocabulary with the characters of ``text`` it lacks appended (fine-tuning on new
        text keeps every old id)."""
        return CharTokenizer(self.vocab + "".join(sorted(set(text) - set(self.lookup))))

    @property
    def kind(self) -> str:
        return "char"

    def encode(self, text: str) -> list[int]:
        return self.encode_array(text).tolist()

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def encode_array(self, text: str) -> np.ndarray:
        self._known(set(text))
        return np.fromiter((self.lookup[c] for c in text), dtype=np.int64, count=len(text))

    def counts(self, texts: Sequence[str]) -> np.ndarray:
        self._known(characters(texts))
        return np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))

    def _known(self, found: set[str]) -> None:
        unknown = found - set(self.lookup)
        if unknown:
            shown = "".join(sorted(unknown))[:40]
            raise TokenizerError(f"the text has characters outside the vocabulary: {shown!r}")

    def decode(self, ids: Iterable[int]) -> str:
        ids = [int(i) for i in ids]
        outside = [i for i in ids if not 0 <= i < len(self.vocab)]
        if outside:
            raise TokenizerError(
                f"token id {outside[0]} is outside the character vocabulary ({len(self.vocab)} characters)"
            )
        return "".join(self.vocab[i] for i in ids)


def characters(texts: Sequence[str]) -> set[str]:
    """The distinct characters of many texts: counted by code point in numpy (a set updated
    character by character is five times slower)."""
    points = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32)
    return set(map(chr, np.flatnonzero(np.bincount(points)).tolist())) if len(points) else set()


def _char_backend(vocab: str):
    """A WordLevel model over single characters: a tokenizer.json any Hugging Face user reads."""
    from tokenizers import Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as Backend

    backend = Backend(models.WordLevel({c: i for i, c in enumerate(vocab)}, unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return backend


# ------------------------------------------------------------------------------ loading


def load_tokenizer(path: str | Path, lowercase: bool | None = None) -> Tokenizer:
    """A ``tokenizer.json``; a WordPiece ``vocab.txt`` (BERT); GPT-2's ``vocab.json`` with its
    ``merges.txt``; or a folder holding one of these (in that order of preference).

    ``lowercase`` applies to a ``vocab.txt`` only (default True, as the uncased BERTs): the
    other files carry their own normalisation."""
    path = Path(path)
    if path.is_dir():
        for name in (TOKENIZER_FILE, "vocab.json", "vocab.txt"):
            if (path / name).is_file():
                return load_tokenizer(path / name, lowercase)
        raise TokenizerError(
            f"{path}: a folder without a tokenizer: expected tokenizer.json, vocab.json + merges.txt "
            "(GPT-2's byte-level BPE) or vocab.txt (BERT's WordPiece)"
        )
    if not path.is_file():
        raise TokenizerError(
            f"{path}: no such file; give a tokenizer.json, a vocab.txt, a folder with vocab.json + "
            "merges.txt, or 'char'"
        )
    if lowercase is not None and path.name != "vocab.txt":
        raise TokenizerError(
            f"data.lowercase applies to a WordPiece vocab.txt only; {path.name} carries its own "
            "normalisation: remove data.lowercase"
        )
    if path.name == "vocab.json":
        return _gpt2_files(path, path.with_name("merges.txt"))
    if path.suffix == ".txt":
        return _wordpiece(path, True if lowercase is None else lowercase)
    if path.suffix == ".json":
        return _tokenizer_json(path)
    raise TokenizerError(
        f"{path}: not a tokenizer file zoo reads; give a tokenizer.json, a vocab.txt, or a folder "
        "with vocab.json + merges.txt"
    )


def _tokenizer_json(path: Path) -> Tokenizer:
    from tokenizers import Tokenizer as Backend

    try:
        backend = Backend.from_file(str(path))
    except Exception as error:  # tokenizers raises a bare Exception on a malformed file
        raise TokenizerError(f"{path}: not a Hugging Face tokenizer.json ({error})") from None
    vocab = _char_vocab(backend)
    if vocab is not None:
        return CharTokenizer(vocab, source=str(path))
    return Tokenizer(backend, str(path))


def _char_vocab(backend) -> str | None:
    """The characters in id order, if ``backend`` is a character tokenizer zoo wrote."""
    state = json.loads(backend.to_str())
    model, pre = state.get("model") or {}, state.get("pre_tokenizer") or {}
    if model.get("type") != "WordLevel" or pre.get("type") != "Split":
        return None
    by_id = {i: token for token, i in model["vocab"].items()}
    if sorted(by_id) != list(range(len(by_id))) or any(len(t) != 1 for t in by_id.values()):
        return None
    return "".join(by_id[i] for i in range(len(by_id)))


def _wordpiece(path: Path, lowercase: bool) -> Tokenizer:
    from tokenizers.implementations import BertWordPieceTokenizer

    lines = path.read_text(encoding="utf-8").splitlines()
    missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if t not in lines]
    if missing:
        raise TokenizerError(
            f"{path}: a WordPiece vocabulary (BERT's vocab.txt, one token a line) without "
            f"{', '.join(missing)}; BERT's special tokens must be in it"
        )
    implementation = BertWordPieceTokenizer(str(path), lowercase=lowercase)
    return Tokenizer(implementation._tokenizer, str(path))


def _gpt2_files(vocab: Path, merges: Path) -> Tokenizer:
    from tokenizers.implementations import ByteLevelBPETokenizer

    if not merges.is_file():
        raise TokenizerError(
            f"{vocab}: GPT-2's byte-level BPE needs merges.txt next to vocab.json; {merges} is missing"
        )
    try:
        implementation = ByteLevelBPETokenizer(str(vocab), str(merges), add_prefix_space=False)
    except Exception as error:
        raise TokenizerError(f"{vocab}, {merges}: not GPT-2 BPE files ({error})") from None
    backend = implementation._tokenizer
    # GPT-2's vocab.json holds <|endoftext|> as an ordinary entry: registering it as special
    # keeps its id and stops BPE from splitting it when it appears in text.
    present = [t for t in SPECIAL_NAMES["eos"] if backend.token_to_id(t) is not None]
    backend.add_special_tokens(present)
    return Tokenizer(backend, f"{vocab.parent}")


# ------------------------------------------------------------------------------ training


def train_bpe(
    texts: Iterable[str],
    vocab_size: int = 8192,
    special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS,
    min_frequency: int = 2,
) -> Tokenizer:
    """A byte-level BPE (GPT-2's scheme) learnt from ``texts``: every byte is in its alphabet,
    so no text is ever out of vocabulary."""
    from tokenizers.implementations import ByteLevelBPETokenizer

    if len(set(special_tokens)) != len(special_tokens):
        raise TokenizerError(f"special tokens {list(special_tokens)} name a token twice")
    smallest = 256 + len(special_tokens)
    if vocab_size < smallest:
        raise TokenizerError(
            f"vocab_size {vocab_size} is below the 256 bytes plus {len(special_tokens)} special "
            f"tokens a byte-level BPE starts from; use at least {smallest}"
        )
    implementation = ByteLevelBPETokenizer(add_prefix_space=False)
    implementation.train_from_iterator(
        texts,
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(special_tokens),
        show_progress=False,
    )
    trained = implementation._tokenizer
    return Tokenizer(trained, f"byte-level BPE, {trained.get_vocab_size()} tokens")


def cached_bpe(texts: Sequence[str], vocab_size: int, special_tokens: Sequence[str]) -> Tokenizer:
    """:func:`train_bpe`, kept under ``$ZOO_CACHE/tokenizers`` by the hash of its inputs: the
    same recipe gets the same tokenizer without training it again."""
    digest = hashlib.sha256(json.dumps([vocab_size, list(special_tokens)]).encode())
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    path = cache_dir("tokenizers") / f"bpe-{digest.hexdigest()[:20]}.json"
    if path.is_file():
        return _tokenizer_json(path)
    tokenizer = train_bpe(texts, vocab_size, special_tokens)
    write_atomically(path, tokenizer.to_json())
    return tokenizer


def write_atomically(path: Path, text: str | bytes) -> Path:
    """Temporary file in the same folder, fsync, rename: a crash never leaves half a file.
    ``text`` is written as UTF-8, bytes as they are."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path
