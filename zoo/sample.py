"""Text generation from a language-model checkpoint, in either framework.

Token choice runs in numpy on the logits each framework returns, so the same checkpoint,
prompt and settings give the same text whichever twin computes the logits. A model with a
key/value cache (a ``decode(ids, cache=None, padding_mask=None) -> (last logits, cache)``
method, as GPT-2's twins have) reads its prompt once and then one token per step; any other
language model re-reads the last ``context_length()`` tokens every step (the character
transformers, and the recurrent nets over a window of ``UNBOUNDED_WINDOW``). A Keras twin runs
compiled: its prompt in one traced call into a static key/value cache, then one traced decode
step per token (``zoo.nn.keras.decoder``), or its re-read window through one traced call; the
torch twin runs eagerly. The numpy sampling after them is one random stream for both.

Text goes through the checkpoint's tokenizer (``zoo.checkpoint_tokenizer.tokenizer_of``: its
``tokenizer.json``, or the character vocabulary of zoo's first language models). Generation
stops at the end-of-sequence token (:func:`eos_ids`: the config's ``eos_token_id``, else the
tokenizer's end of text), as transformers' ``generate`` does, unless asked to go on.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.backend import load_checkpoint
from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tensors import framework_of
from zoo.checkpoint_tokenizer import saved_tokenizer
from zoo.limits import MAX_SAMPLE_LENGTH
from zoo.loading import checkpoint_file
from zoo.recipe.trainer import SEED_LIMIT
from zoo.tokenizer import TOKENIZER_FILE, TokenizerError

UNBOUNDED_WINDOW = 256  # tokens re-read per step by a model of unbounded context (a recurrent net)


class PromptError(ValueError):
    """A prompt or sampling setting the model cannot take."""


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen from the logits.

    ``temperature`` 0 is greedy (the most likely token; ties go to the lowest id, as
    ``argmax``); otherwise the softmax of logits / temperature is sampled, after keeping only
    the ``top_k`` most likely tokens and then the smallest set whose probabilities add up to
    ``top_p`` (nucleus sampling), from a generator seeded with ``seed``.
    """

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise PromptError(f"temperature must be >= 0 and finite (0 is greedy), got {self.temperature}")
        if not 0 <= self.seed < SEED_LIMIT:
            raise PromptError(f"seed must lie in 0 .. {SEED_LIMIT - 1}, got {self.seed}")
        if self.top_k is not None and self.top_k < 1:
            raise PromptError(f"top_k must be >= 1 (or unset for the whole vocabulary), got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise PromptError(f"top_p must lie in (0, 1] (1 keeps every token), got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def choose(self, logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """(N, V) logits -> (N,) token ids."""
        logits = np.asarray(logits, dtype=np.float64)
        if self.greedy:
            return np.argmax(logits, axis=-1)
        return np.array([self._draw(row, rng) for row in logits], dtype=np.int64)

    def _draw(self, logits: np.ndarray, rng: np.random.Generator) -> int:
        # Shifted before the division: a tiny temperature then sends the others to -inf (p = 0)
        # instead of the largest to inf (inf - inf = nan).
        with np.errstate(over="ignore"):
            scaled = (logits - logits.max()) / self.temperature
        if self.top_k is not None and self.top_k < scaled.size:
            kth = np.partition(scaled, -self.top_k)[-self.top_k]
            scaled = np.where(scaled < kth, -np.inf, scaled)
        probabilities = np.exp(scaled)
        probabilities /= probabilities.sum()
        if self.top_p is not None and self.top_p < 1:
            order = np.argsort(-probabilities, kind="stable")
            cumulative = np.cumsum(probabilities[order])
            # every token whose predecessors add up to less than top_p: at least the most likely one
            kept = order[: int(np.searchsorted(cumulative, self.top_p, side="left")) + 1]
            nucleus = np.zeros_like(probabilities)
            nucleus[kept] = probabilities[kept]
            probabilities = nucleus / nucleus.sum()
        return int(rng.choice(probabilities.size, p=probabilities))


def sample(
    path: str | Path,
    prompt: str = "",
    length: int = 200,
    temperature: float = 0.0,
    framework: str = "lightning",
    seed: int = 0,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    ignore_eos: bool = False,
) -> str:
    """``prompt`` followed by the text of up to ``length`` generated tokens, ending at the first
    end-of-sequence token (:func:`eos_ids`) unless ``ignore_eos``; temperature 0 is greedy."""
    return sample_tokens(
        path, prompt, length, temperature, framework, seed, top_k, top_p, ignore_eos=ignore_eos
    ).text


@dataclass(frozen=True)
class Sampled:
    """A generation with its token ids (``zoo sample --json``): decoding ids and encoding the
    text again need not give the same ids back, so they are kept as generated."""

    text: str  # the prompt followed by the generated text
    prompt_ids: list[int]  # what the model read first (a start token for an empty prompt)
    ids: list[int]  # the generated tokens, after the prompt (the end-of-sequence token included)
    stop: str = "length"  # why generation stopped: "eos" (the end-of-sequence token) or "length"


def sample_tokens(
    path: str | Path,
    prompt: str = "",
    length: int = 200,
    temperature: float = 0.0,
    framework: str = "lightning",
    seed: int = 0,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    ignore_eos: bool = False,
) -> Sampled:
    """:func:`sample`, with the token ids read and generated and why it stopped."""
    check_length(length)  # before the model is read
    given, path = path, checkpoint_file(path)  # a run folder's, an adapter merged onto its base, an import
    checkpoint = read_checkpoint(path)
    if checkpoint.config.active_task != "language_modeling":
        raise CheckpointError(
            f"{given}: a {checkpoint.family.name} model for {checkpoint.config.active_task}, not a language "
            "model; zoo sample needs task language_modeling"
        )
    sampling = Sampling(temperature, top_k, top_p, seed)
    tokenizer = saved_tokenizer(checkpoint)
    if tokenizer is None:
        raise CheckpointError(
            f"{given}: has no tokenizer: no {TOKENIZER_FILE} beside it (nor beside its base, for a LoRA "
            "adapter) and no character vocabulary (task_info.vocab) in its metadata; put the model's "
            f"{TOKENIZER_FILE} beside it"
        )
    try:
        ids = tokenizer.encode(prompt)
    except TokenizerError as error:
        raise PromptError(f"the prompt cannot be encoded by the model's tokenizer: {error}") from None
    if not ids:
        ids = [start_id(tokenizer)]
    model = load_checkpoint(path, framework)
    window = checkpoint.config.context_length() or UNBOUNDED_WINDOW
    stops = () if ignore_eos else eos_ids(checkpoint.config, tokenizer)
    generated = generate(model, np.asarray([ids], dtype=np.int64), length, sampling, window, eos=stops)
    kept = until_eos(generated[0], stops)
    try:
        text = tokenizer.decode(kept)
    except TokenizerError as error:
        raise CheckpointError(
            f"{given}: the model generated a token its tokenizer has no text for ({error}): the tokenizer "
            f"({tokenizer.vocab_size} tokens) is not the one of this model (vocab_size "
            f"{getattr(checkpoint.config, 'vocab_size', '?')}); put the model's tokenizer.json beside it"
        ) from None
    stop = "eos" if len(kept) and kept[-1] in stops else "length"
    return Sampled(prompt + text, list(ids), kept, stop)


def eos_ids(config: Any, tokenizer: Any) -> frozenset[int]:
    """The ids generation stops at, as transformers' ``generate`` does: the config's
    ``eos_token_id`` (one id or several), else the tokenizer's end-of-text token; none for a
    model that has neither (a character model)."""
    declared = getattr(config, "eos_token_id", None)
    if declared is not None:
        return frozenset([declared] if isinstance(declared, int) else declared)
    found = tokenizer.eos_id if tokenizer is not None else None
    return frozenset() if found is None else frozenset([found])


def until_eos(generated: np.ndarray, eos: Collection[int]) -> list[int]:
    """One row of generated ids up to its first end-of-sequence token, that token included."""
    ids = [int(i) for i in generated]
    for position, token in enumerate(ids):
        if token in eos:
            return ids[: position + 1]
    return ids


def check_length(length: int) -> None:
    if not 1 <= length <= MAX_SAMPLE_LENGTH:
        raise PromptError(f"length must lie in 1 .. {MAX_SAMPLE_LENGTH:,} tokens, got {length:,}")


def start_id(tokenizer) -> int:
    """What an empty prompt starts from: end-of-text (GPT-2's document separator), else a
    newline, else id 0."""
    if tokenizer.eos_id is not None:
        return tokenizer.eos_id
    try:
        newline = tokenizer.encode("\n")
    except ValueError:
        newline = []
    return newline[0] if len(newline) == 1 else 0


def generate(
    model: Any,
    prompts: np.ndarray,
    length: int,
    sampling: Sampling = Sampling(),
    window: int | None = None,
    padding_mask: np.ndarray | None = None,
    eos: Collection[int] = (),
) -> np.ndarray:
    """(N, length) token ids generated after ``prompts`` (N, T) by a torch or Keras twin; fewer
    columns where every row has produced one of the ``eos`` ids (generation stops there: read
    each row up to its first, :func:`until_eos`).

    ``padding_mask`` (N, T), True at padding, lets prompts of different lengths share a batch:
    left-pad them (the new tokens follow the last column). A model with ``decode`` uses its
    key/value cache; others re-read the last ``window`` tokens each step, and refuse padding.
    ``window`` defaults to the model's ``context_length()``.
    """
    check_length(length)
    prompts = np.asarray(prompts, dtype=np.int64)
    if prompts.ndim != 2 or prompts.shape[1] == 0:
        raise PromptError(f"prompts must be (N, T) token ids with T >= 1, got shape {prompts.shape}")
    config = model.zoo_config
    window = window or config.context_length() or UNBOUNDED_WINDOW
    runner = _Runner(model, room=min(window, min(prompts.shape[1], window) + length))
    rng = np.random.default_rng(sampling.seed)
    if not runner.cached and padding_mask is not None and np.any(padding_mask):
        raise PromptError(f"a {type(model).__name__} without a key/value cache takes unpadded prompts only")
    ids = prompts
    padding = np.zeros(prompts.shape, bool) if padding_mask is None else np.asarray(padding_mask, bool)
    out = np.zeros((prompts.shape[0], length), dtype=np.int64)
    stops = np.asarray(sorted(eos), dtype=np.int64)
    ended = np.zeros(prompts.shape[0], dtype=bool)
    cache, logits = None, None
    for step in range(length):
        if stops.size and ended.all():
            return out[:, :step]
        if not runner.cached:
            logits = runner.last_logits(ids[:, -window:])
        elif cache is None or runner.full(cache, window):  # first step, or the position table is full
            logits, cache = runner.decode(ids[:, -window:], None, padding[:, -window:])
        else:
            logits, cache = runner.decode(ids[:, -1:], cache, None)
        out[:, step] = sampling.choose(logits, rng)
        ended |= np.isin(out[:, step], stops)
        ids = np.concatenate([ids, out[:, step : step + 1]], axis=1)
        padding = np.concatenate([padding, np.zeros((len(ids), 1), bool)], axis=1)
    return out


class _Runner:
    """One twin's logits as numpy, through its cache where it has one.

    A Keras twin runs compiled (unless its ``compiled_generation`` is set False: then eagerly,
    as before issue 41): with a cache (GPT-2's and Llama's) it reads the prompt with ``prefill``
    into a static cache of ``room`` slots and then each token with the traced ``decode_step``;
    without one, its re-read window goes through one traced call. The torch twin calls
    ``decode``, or the model, eagerly."""

    def __init__(self, model: Any, room: int):
        self.model, self.room = model, room
        self.keras = framework_of(model) == "keras"
        self.cached = callable(getattr(model, "decode", None))
        self.compiled = self.keras and bool(getattr(model, "compiled_generation", True))
        self.static = self.compiled and self.cached and callable(getattr(model, "decode_step", None))
        if not self.keras:
            model.eval()

    def full(self, cache: Any, window: int) -> bool:
        """Whether the next token finds no room: the position table (``window``) is full, or a
        static cache's slots are (then the last ``window`` tokens are read again)."""
        return cache.length >= (min(window, cache.max_length) if self.static else window)

    def last_logits(self, ids: np.ndarray) -> np.ndarray:
        if self.compiled:
            from zoo.nn.keras.decoder import last_logits_function

            return np.asarray(last_logits_function(self.model)(ids))
        if self.keras:
            return np.asarray(self.model(ids, training=False))[:, -1]
        import torch

        with torch.no_grad():
            return self.model(torch.from_numpy(ids)).numpy()[:, -1]

    def decode(self, ids: np.ndarray, cache: Any, padding: np.ndarray | None):
        padded = padding is not None and bool(np.any(padding))
        if self.static:
            if cache is None:
                logits, cache = self.model.prefill(ids, padding if padded else None, self.room)
            else:
                logits, cache = self.model.decode_step(ids, cache)
            return np.asarray(logits), cache
        if self.keras:
            logits, cache = self.model.decode(ids, cache, padding if padded else None)
            return np.asarray(logits), cache
        import torch

        with torch.no_grad():
            mask = torch.from_numpy(padding) if padded else None
            logits, cache = self.model.decode(torch.from_numpy(ids), cache, mask)
        return logits.numpy(), cache
