"""How the next token is chosen from a language model's logits: the same numpy code after
either twin, so one checkpoint, prompt and settings give the same tokens in both.

The settings mean what transformers' logits processors mean, in the order its ``generate``
applies them (``tests/test_sampling.py`` checks the scores against its
``LogitsProcessorList``): the repetition penalty (``RepetitionPenaltyLogitsProcessor``) over
every token read or generated so far, then temperature, top-k and top-p
(``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``). Temperature 0 is
greedy: the most likely token after the penalty, as ``do_sample=False``.

Each row of a batch draws from its own generator seeded with ``seed``, one uniform number per
token: a prompt's tokens depend on the prompt, the settings and the seed, and not on the other
prompts of its batch nor on the batch size (transformers' ``generate`` draws the rows of a batch
from one stream instead, so its sampled tokens differ from zoo's and from each prompt's alone).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from zoo.recipe.trainer import SEED_LIMIT

MAX_REPETITION_PENALTY = 100.0  # transformers suggests about 1.2; past 100 the text is noise


class PromptError(ValueError):
    """A prompt or sampling setting the model cannot take."""


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen from the logits.

    ``repetition_penalty`` (1 is none) divides the positive logits and multiplies the negative
    ones of every token already in the row (the prompt's, padding excluded, and the generated
    ones), as transformers' ``repetition_penalty``. ``temperature`` 0 is greedy (the most likely
    token; ties go to the lowest id, as ``argmax``); otherwise the softmax of logits /
    temperature is sampled, after keeping only the ``top_k`` most likely tokens (ties at the
    k-th kept) and then the smallest set of the likeliest whose probabilities add up to
    ``top_p`` (nucleus sampling), one draw per token from a generator seeded with ``seed``.
    """

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise PromptError(f"temperature must be >= 0 and finite (0 is greedy), got {self.temperature}")
        if not 0 <= self.seed < SEED_LIMIT:
            raise PromptError(f"seed must lie in 0 .. {SEED_LIMIT - 1}, got {self.seed}")
        if self.top_k is not None and self.top_k < 1:
            raise PromptError(f"top_k must be >= 1 (or unset for the whole vocabulary), got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise PromptError(f"top_p must lie in (0, 1] (1 keeps every token), got {self.top_p}")
        if not 0 < self.repetition_penalty <= MAX_REPETITION_PENALTY:  # nan fails too
            raise PromptError(
                f"repetition_penalty must lie in (0, {MAX_REPETITION_PENALTY:g}] (1 is none, above 1 "
                f"discourages repeats), got {self.repetition_penalty}"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def scores(self, logits: np.ndarray, seen: np.ndarray | None = None) -> np.ndarray:
        """(N, V) logits -> the (N, V) float64 scores tokens are chosen from: transformers'
        processed scores up to a constant per row (the row's largest is subtracted before the
        temperature, so that a tiny one sends the others to -inf instead of the largest to
        inf), -inf where top-k or top-p filter a token out. ``seen`` (N, V) is True at the
        tokens the repetition penalty applies to."""
        scores = np.asarray(logits, dtype=np.float64)
        if self.repetition_penalty != 1 and seen is not None:
            penalised = np.where(
                scores < 0, scores * self.repetition_penalty, scores / self.repetition_penalty
            )
            scores = np.where(seen, penalised, scores)
        if self.greedy:
            return scores
        with np.errstate(over="ignore"):
            scores = (scores - scores.max(axis=-1, keepdims=True)) / self.temperature
        if self.top_k is not None and self.top_k < scores.shape[-1]:
            kth = np.partition(scores, -self.top_k, axis=-1)[:, -self.top_k :].min(axis=-1, keepdims=True)
            scores = np.where(scores < kth, -np.inf, scores)
        if self.top_p is not None and self.top_p < 1:
            scores = _nucleus(scores, self.top_p)
        return scores

    def choose(
        self,
        logits: np.ndarray,
        rng: np.random.Generator | Sequence[np.random.Generator],
        seen: np.ndarray | None = None,
    ) -> np.ndarray:
        """(N, V) logits -> (N,) token ids; ``rng`` is one generator for every row, or one per
        row (what :func:`zoo.sample.generate` passes)."""
        scores = self.scores(logits, seen)
        if self.greedy:
            return np.argmax(scores, axis=-1)
        probabilities = np.exp(scores - scores.max(axis=-1, keepdims=True))
        rngs = [rng] * len(scores) if isinstance(rng, np.random.Generator) else rng
        return np.array(
            [_draw(row, generator) for row, generator in zip(probabilities, rngs, strict=True)],
            dtype=np.int64,
        )


def _nucleus(scores: np.ndarray, top_p: float) -> np.ndarray:
    """transformers' ``TopPLogitsWarper``: in ascending order, every token whose cumulative
    probability is at most 1 - top_p goes (the likeliest always stays)."""
    order = np.argsort(scores, axis=-1, kind="stable")
    ascending = np.take_along_axis(scores, order, axis=-1)
    probabilities = np.exp(ascending - ascending[:, -1:])
    cumulative = np.cumsum(probabilities / probabilities.sum(axis=-1, keepdims=True), axis=-1)
    dropped = cumulative <= 1 - top_p
    dropped[:, -1] = False
    removed = np.empty_like(dropped)
    np.put_along_axis(removed, order, dropped, axis=-1)
    return np.where(removed, -np.inf, scores)


def _draw(weights: np.ndarray, rng: np.random.Generator) -> int:
    """One token from unnormalised probabilities with one uniform number: the first whose
    cumulative weight passes it (never a token of weight 0)."""
    cumulative = np.cumsum(weights)
    chosen = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return min(chosen, int(np.flatnonzero(weights)[-1]))


def seen_tokens(prompts: np.ndarray, padding: np.ndarray, vocab: int) -> np.ndarray:
    """(N, vocab) True at each row's prompt tokens, padding excluded (as transformers skips the
    left padding its attention mask marks)."""
    seen = np.zeros((len(prompts), vocab), dtype=bool)
    rows, columns = np.nonzero(~padding)
    seen[rows, prompts[rows, columns]] = True
    return seen
