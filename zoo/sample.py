"""Text generation from a language-model checkpoint, in either framework.

Token choice runs in numpy on the logits each framework returns, so the same checkpoint,
prompt and settings give the same text whichever twin computes the logits. A model with a
key/value cache (a ``decode(ids, cache=None, padding_mask=None) -> (last logits, cache)``
method, as GPT-2's twins have) reads its prompt once and then one token per step; any other
language model re-reads the last ``context_length()`` tokens every step (the character
transformers, and the recurrent nets over a window of ``UNBOUNDED_WINDOW``). A Keras twin runs
compiled: its prompt in one traced call into a static key/value cache, then one traced decode
step per token (``zoo.nn.keras.decoder``), or its re-read window through one traced call; the
torch twin runs eagerly. The numpy token choice after them (:mod:`zoo.sampling`) draws the
same numbers for both.

Text goes through the checkpoint's tokenizer (``zoo.checkpoint_tokenizer.tokenizer_of``: its
``tokenizer.json``, or the character vocabulary of zoo's first language models). Generation
stops at the end-of-sequence token (:func:`eos_ids`: the config's ``eos_token_id``, else the
tokenizer's end of text), as transformers' ``generate`` does, unless asked to go on, and at
the stop strings asked for. Many prompts go through in left-padded batches.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.backend import load_checkpoint
from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tensors import framework_of
from zoo.checkpoint_tokenizer import saved_tokenizer
from zoo.limits import MAX_BATCH_SIZE, MAX_SAMPLE_LENGTH
from zoo.loading import checkpoint_file
from zoo.sampling import PromptError, Sampling, seen_tokens
from zoo.tokenizer import TOKENIZER_FILE, TokenizerError

GREEDY = Sampling()  # generate's default
UNBOUNDED_WINDOW = 256  # tokens re-read per step by a model of unbounded context (a recurrent net)


def sample(
    path: str | Path,
    prompt: str | Sequence[str] = "",
    length: int = 200,
    temperature: float = 0.0,
    framework: str = "lightning",
    seed: int = 0,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    ignore_eos: bool = False,
    repetition_penalty: float = 1.0,
    stop: Sequence[str] = (),
    batch_size: int = 8,
) -> Any:
    """``prompt`` followed by the text of up to ``length`` generated tokens, ending at the first
    end-of-sequence token (:func:`eos_ids`) unless ``ignore_eos``, or just after the first of
    the ``stop`` strings; temperature 0 is greedy. A list of prompts gives a list of texts,
    generated ``batch_size`` at a time (:func:`sample_tokens`; the settings: :class:`Sampling`)."""
    done = sample_tokens(
        path, prompt, length, temperature, framework, seed, top_k, top_p, ignore_eos=ignore_eos,
        repetition_penalty=repetition_penalty, stop=stop, batch_size=batch_size,
    )  # fmt: skip
    return done.text if isinstance(done, Sampled) else [each.text for each in done]


@dataclass(frozen=True)
class Sampled:
    """A generation with its token ids (``zoo sample --json``): decoding ids and encoding the
    text again need not give the same ids back, so they are kept as generated."""

    text: str  # the prompt followed by the generated text (cut just after a stop string)
    prompt_ids: list[int]  # what the model read first (a start token for an empty prompt)
    ids: list[int]  # the generated tokens, after the prompt (the end-of-sequence token included)
    stop: str = "length"  # why generation stopped: "eos", "stop" (a stop string) or "length"


def sample_tokens(
    path: str | Path,
    prompt: str | Sequence[str] = "",
    length: int = 200,
    temperature: float = 0.0,
    framework: str = "lightning",
    seed: int = 0,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    ignore_eos: bool = False,
    repetition_penalty: float = 1.0,
    stop: Sequence[str] = (),
    batch_size: int = 8,
) -> Any:
    """:func:`sample`, with the token ids read and generated and why each stopped: a
    :class:`Sampled` for one prompt, a list of them for a list of prompts.

    The prompts of a batch are left-padded (a model without a key/value cache batches prompts
    of one length only); each prompt's tokens are what it gets alone (:class:`Sampling`). A
    row stops at the first token after which its generated text (the prompt's not included)
    contains one of ``stop``; its text is then cut just after that string, and its ids end with
    that token (transformers' ``stop_strings`` keep the token too, and decode all of it)."""
    check_length(length)  # before the model is read
    sampling = Sampling(temperature, top_k, top_p, seed, repetition_penalty)
    prompts, stops = _checked(prompt, stop, batch_size)
    given, path = path, checkpoint_file(path)  # a run folder's, an adapter merged onto its base, an import
    checkpoint = read_checkpoint(path)
    if checkpoint.config.active_task != "language_modeling":
        raise CheckpointError(
            f"{given}: a {checkpoint.family.name} model for {checkpoint.config.active_task}, not a language "
            "model; zoo sample needs task language_modeling"
        )
    tokenizer = saved_tokenizer(checkpoint)
    if tokenizer is None:
        raise CheckpointError(
            f"{given}: has no tokenizer: no {TOKENIZER_FILE} beside it (nor beside its base, for a LoRA "
            "adapter) and no character vocabulary (task_info.vocab) in its metadata; put the model's "
            f"{TOKENIZER_FILE} beside it"
        )
    encoded = [
        _encoded(tokenizer, text, i, len(prompts), checkpoint.config) for i, text in enumerate(prompts)
    ]
    model = load_checkpoint(path, framework)
    eos = () if ignore_eos else eos_ids(checkpoint.config, tokenizer)
    text = _Text(tokenizer, eos, stops, f"{given}: the model", getattr(checkpoint.config, "vocab_size", "?"))
    done: list[Sampled] = [None] * len(prompts)  # type: ignore[list-item]
    for batch in _batches(encoded, batch_size, same_length=not callable(getattr(model, "decode", None))):
        ids, padding = left_padded([encoded[i] for i in batch])
        generated = generate(
            model, ids, length, sampling, checkpoint.config.context_length() or UNBOUNDED_WINDOW,
            padding if padding.any() else None, eos, text.stopped if stops else None,
        )  # fmt: skip
        for row, i in enumerate(batch):
            done[i] = text.finished(prompts[i], encoded[i], generated[row])
    return done[0] if isinstance(prompt, str) else done


def _checked(prompt: str | Sequence[str], stop: Sequence[str], batch_size: int) -> tuple[list[str], tuple]:
    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    if not prompts:
        raise PromptError("no prompts given: give one or more (an empty one starts at the start token)")
    if not all(isinstance(p, str) for p in prompts):
        raise PromptError("prompts must be strings (a str, or a list of them)")
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    if not all(isinstance(s, str) and s for s in stops):
        raise PromptError(f"stop strings must be non-empty strings, got {list(stops)!r}")
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise PromptError(f"batch_size must lie in 1 .. {MAX_BATCH_SIZE:,}, got {batch_size:,}")
    return prompts, stops


def _encoded(tokenizer: Any, prompt: str, index: int, count: int, config: Any) -> list[int]:
    """A prompt's ids (the start token for an empty one), refused past the model's context."""
    which = "the prompt" if count == 1 else f"prompt {index + 1} of {count}"
    try:
        ids = tokenizer.encode(prompt) or [start_id(tokenizer)]
    except TokenizerError as error:
        raise PromptError(f"{which} cannot be encoded by the model's tokenizer: {error}") from None
    context = config.context_length()
    if context is not None and len(ids) > context:
        raise PromptError(
            f"{which} is {len(ids):,} tokens, longer than the model's context of {context:,}: "
            f"shorten it to {context:,} tokens or fewer"
        )
    return ids


def _batches(encoded: list[list[int]], size: int, same_length: bool) -> list[list[int]]:
    """Indices of the prompts, ``size`` at a time (of one length each, if ``same_length``)."""
    groups: dict[int, list[int]] = {}
    for i, ids in enumerate(encoded):
        groups.setdefault(len(ids) if same_length else 0, []).append(i)
    return [group[start : start + size] for group in groups.values() for start in range(0, len(group), size)]


def left_padded(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(N, T) ids left-padded with 0 and the (N, T) padding mask (True at padding)."""
    width = max(len(row) for row in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    padding = np.ones((len(rows), width), dtype=bool)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :], padding[i, width - len(row) :] = row, False
    return ids, padding


class _Text:
    """Generated ids as text: the stop-string check during generation and each row's end."""

    def __init__(self, tokenizer: Any, eos: Collection[int], stops: tuple[str, ...], who: str, vocab: Any):
        self.tokenizer, self.eos, self.stops, self.who, self.vocab = tokenizer, eos, stops, who, vocab

    def decoded(self, ids: list[int]) -> str:
        try:
            return self.tokenizer.decode(ids)
        except TokenizerError as error:
            raise CheckpointError(
                f"{self.who} generated a token its tokenizer has no text for ({error}): the tokenizer "
                f"({self.tokenizer.vocab_size} tokens) is not the one of this model (vocab_size "
                f"{self.vocab}); put the model's tokenizer.json beside it"
            ) from None

    def stop_end(self, text: str) -> int | None:
        """Where ``text`` is cut: just after the stop string that ends first in it, if any."""
        ends = [text.find(s) + len(s) for s in self.stops if s in text]
        return min(ends) if ends else None

    def stopped(self, generated: np.ndarray) -> np.ndarray:
        return np.array(
            [self.stop_end(self.decoded(until_eos(row, self.eos))) is not None for row in generated]
        )

    def finished(self, prompt: str, prompt_ids: list[int], generated: np.ndarray) -> Sampled:
        kept = until_eos(generated, self.eos)
        text = self.decoded(kept)
        end = self.stop_end(text) if self.stops else None
        if end is not None:  # the ids up to the token that completed the stop string
            count = next(
                n for n in range(1, len(kept) + 1) if self.stop_end(self.decoded(kept[:n])) is not None
            )
            return Sampled(prompt + text[:end], list(prompt_ids), kept[:count], "stop")
        stop = "eos" if kept and kept[-1] in self.eos else "length"
        return Sampled(prompt + text, list(prompt_ids), kept, stop)


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
    sampling: Sampling = GREEDY,
    window: int | None = None,
    padding_mask: np.ndarray | None = None,
    eos: Collection[int] = (),
    stop: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """(N, length) token ids generated after ``prompts`` (N, T) by a torch or Keras twin; fewer
    columns where every row has ended: produced one of the ``eos`` ids (read each row up to its
    first, :func:`until_eos`) or, given ``stop`` ((N, k) ids generated so far -> (N,) True where
    a row is done: a stop string), been stopped by it.

    ``padding_mask`` (N, T), True at padding, lets prompts of different lengths share a batch:
    left-pad them (the new tokens follow the last column); padding is neither attended to nor
    repetition-penalised, and each row draws from its own generator (:class:`Sampling`), so a
    row's tokens are the prompt's alone. A model with ``decode`` uses its key/value cache;
    others re-read the last ``window`` tokens each step, and refuse padding. ``window``
    defaults to the model's ``context_length()``.
    """
    check_length(length)
    prompts = np.asarray(prompts, dtype=np.int64)
    if prompts.ndim != 2 or prompts.shape[1] == 0:
        raise PromptError(f"prompts must be (N, T) token ids with T >= 1, got shape {prompts.shape}")
    window = window or model.zoo_config.context_length() or UNBOUNDED_WINDOW
    runner = _Runner(model, room=min(window, min(prompts.shape[1], window) + length))
    if not runner.cached and padding_mask is not None and np.any(padding_mask):
        raise PromptError(f"a {type(model).__name__} without a key/value cache takes unpadded prompts only")
    padding = np.zeros(prompts.shape, bool) if padding_mask is None else np.asarray(padding_mask, bool)
    penalised = sampling.repetition_penalty != 1
    if runner.loops_greedily(sampling, stop, prompts.shape[1] + length):
        return runner.model.greedy(prompts, padding, length, eos)  # the loop below, traced whole
    rows = np.arange(len(prompts))
    rngs = [np.random.default_rng(sampling.seed) for _ in rows]
    ids = prompts
    out = np.zeros((prompts.shape[0], length), dtype=np.int64)
    stops = np.asarray(sorted(eos), dtype=np.int64)
    ended = np.zeros(prompts.shape[0], dtype=bool)
    cache, seen = None, None
    for step in range(length):
        if ended.all():
            return out[:, :step]
        logits, cache = runner.next_logits(ids, padding, cache, window)
        if penalised and seen is None:
            seen = seen_tokens(prompts, padding[:, : prompts.shape[1]], logits.shape[-1])
        out[:, step] = sampling.choose(logits, rngs, seen)
        if seen is not None:
            seen[rows, out[:, step]] = True
        ended |= np.isin(out[:, step], stops)
        if stop is not None:
            ended |= stop(out[:, : step + 1])
        ids = np.concatenate([ids, out[:, step : step + 1]], axis=1)
        padding = np.concatenate([padding, np.zeros((len(ids), 1), bool)], axis=1)
    return out


class _Runner:
    """One twin's logits as numpy, through its cache where it has one.

    A Keras twin runs compiled (unless its ``compiled_generation`` is set False: then eagerly,
    as before issue 41): with a cache (GPT-2's and Llama's) it reads the prompt with ``prefill``
    into a static cache of ``room`` slots and then each token with the traced ``decode_step``
    (greedy decoding that fits the context, with no penalty or stop string, runs all of its
    steps in one traced loop instead: ``greedy``);
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

    def loops_greedily(self, sampling: Sampling, stop: Any, slots: int) -> bool:
        """Whether the Keras twin's one traced greedy loop writes the tokens: greedy, with no
        penalty nor stop string (numpy's work between steps), into a static cache that never
        fills (``slots``, prompt and new tokens, within the room)."""
        plain = sampling.greedy and sampling.repetition_penalty == 1 and stop is None
        return self.static and plain and self.room == slots

    def full(self, cache: Any, window: int) -> bool:
        """Whether the next token finds no room: the position table (``window``) is full, or a
        static cache's slots are (then the last ``window`` tokens are read again)."""
        return cache.length >= (min(window, cache.max_length) if self.static else window)

    def next_logits(self, ids: np.ndarray, padding: np.ndarray, cache: Any, window: int):
        """(N, V) logits of the token after ``ids`` (N, t), and the cache to go on with."""
        if not self.cached:
            return self.last_logits(ids[:, -window:]), None
        if cache is None or self.full(cache, window):  # first step, or the position table is full
            return self.decode(ids[:, -window:], None, padding[:, -window:])
        return self.decode(ids[:, -1:], cache, None)

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
