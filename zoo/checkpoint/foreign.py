"""Foreign weight layouts (torchvision, timm, transformers): the contract a family fills.

A family lists the layouts it reads and writes in ``Family.formats``. Each is two pure
numpy functions, named by ``"module:callable"`` so that nothing is imported before it is
used:

- ``to_zoo(tensors, meta) -> (config_fields, tensors)``: a foreign state dict (and the
  ``config.json`` beside it, or ``{}``) into the family's config fields and its canonical
  tensors. Weights that are not this layout raise :class:`ForeignLayoutError` naming the
  keys that could not be placed, so ``zoo import`` can say why nothing fits. A layout with
  attention takes ``num_heads=`` as well: the head count the user gave (``zoo import
  --num-heads``), which no tensor shape shows; without it and a ``config.json`` that says
  it, the format refuses rather than guesses.
- ``from_zoo(config, tensors) -> (tensors, meta)``: the reverse, with the ``config.json``
  the foreign library wants beside the weights (or ``None``). A format that writes a
  ``config.json`` may take ``source=`` as well: the ``config.json`` the checkpoint was imported
  from (in its ``source`` metadata), whose fields zoo's config does not model (an activation's
  name, token ids, label names) it writes back as they were; and ``preprocessing=``: the
  checkpoint's :class:`zoo.preprocessing.Preprocessing` (or None), whose mean, std, crop and label
  names it writes where the foreign config has a place for them (timm's ``pretrained_cfg``,
  transformers' ``id2label``).
- ``preprocessing(config, meta) -> Preprocessing | None`` (optional): what the foreign files say
  the inputs went through (timm's ``pretrained_cfg``, torchvision's eval transform, transformers'
  ``id2label``), which ``zoo import`` records in the checkpoint. A config.json that asks for a
  transform zoo does not compute raises :class:`zoo.preprocessing.PreprocessingError`.

Reading files and writing zoo checkpoints is :mod:`zoo.interchange`'s; a format only maps.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

Tensors = dict[str, np.ndarray]


class ForeignLayoutError(ValueError):
    """Weights that are not the layout a format reads: ``unplaced`` are the foreign keys it
    could not place (or, with ``missing``, the keys it needed and did not find)."""

    def __init__(self, message: str, unplaced: Iterable[str] = (), missing: Iterable[str] = ()):
        super().__init__(message)
        self.unplaced = list(unplaced)
        self.missing = list(missing)


@dataclass(frozen=True)
class ForeignFormat:
    name: str  # what users pass to --format: "torchvision", "timm", "hf"
    description: str
    to_zoo: str  # "module:callable(tensors, meta[, num_heads=]) -> (config_fields, tensors)"
    from_zoo: str  # "module:callable(config, tensors[, source=, preprocessing=]) -> (tensors, meta | None)"
    preprocessing: str | None = None  # "module:callable(config, meta) -> Preprocessing | None"

    def read(
        self, tensors: Tensors, meta: Mapping[str, Any], num_heads: int | None = None
    ) -> tuple[dict[str, Any], Tensors]:
        reader = resolve(self.to_zoo)
        if num_heads is None:
            return reader(tensors, meta)
        if not _takes(reader, "num_heads"):
            # it read none of the tensors: ranked after the formats that tried (zoo import's message)
            raise ForeignLayoutError(
                f"the {self.name} layout has no attention heads to count (--num-heads)",
                unplaced=list(tensors),
            )
        return reader(tensors, meta, num_heads=num_heads)

    def write(
        self,
        config: Any,
        tensors: Tensors,
        source: Mapping[str, Any] | None = None,
        preprocessing: Any = None,
    ) -> tuple[Tensors, dict[str, Any] | None]:
        writer = resolve(self.from_zoo)
        extra: dict[str, Any] = {}
        if source and _takes(writer, "source"):
            extra["source"] = source
        if preprocessing is not None and _takes(writer, "preprocessing"):
            extra["preprocessing"] = preprocessing
        return writer(config, tensors, **extra)

    def read_preprocessing(self, config: Any, meta: Mapping[str, Any]) -> Any:
        """What the foreign files say the inputs went through, or None where the format says nothing."""
        return None if self.preprocessing is None else resolve(self.preprocessing)(config, meta)


def _takes(function: Callable[..., Any], keyword: str) -> bool:
    """Whether a format's callable accepts ``keyword`` (the contract's optional arguments)."""
    return keyword in inspect.signature(function).parameters


def timm_variant(meta: Mapping[str, Any], variants: Iterable[str], reads: str) -> str:
    """The timm factory a ``config.json`` names, without its pretrained tag ("resnet50.a1_in1k" ->
    "resnet50"), if it is one of ``variants``; refused otherwise, saying what the family ``reads``."""
    architecture = str(meta.get("architecture", ""))
    name = architecture.split(".")[0]
    if name not in variants:
        raise ForeignLayoutError(
            f"config.json names the timm architecture {architecture!r}; {reads}: {', '.join(variants)}"
        )
    return name


def renamed(
    tensors: Mapping[str, np.ndarray],
    names: Mapping[str, str],
    *,
    ignore: Callable[[str], bool] = lambda key: False,
    what: str = "weights",
) -> Tensors:
    """``tensors`` renamed by ``names`` (source key -> target key), checking that every
    source key is placed (or ignored) and every named key is present."""
    unplaced = [key for key in tensors if key not in names and not ignore(key)]
    missing = [key for key in names if key not in tensors]
    if unplaced or missing:
        raise ForeignLayoutError(
            f"these {what} do not fit: "
            + "; ".join(
                part
                for part in (
                    f"unplaced {_some(unplaced)}" if unplaced else "",
                    f"missing {_some(missing)}" if missing else "",
                )
                if part
            ),
            unplaced,
            missing,
        )
    return {target: tensors[source] for source, target in names.items()}


def check_shapes(
    placed: Mapping[str, np.ndarray],
    shapes: Mapping[str, tuple[int, ...]],
    what: str,
    *,
    theirs: Callable[[str], str] = lambda key: key,
    their_shape: Callable[[str, tuple[int, ...]], tuple[int, ...]] = lambda name, shape: shape,
) -> None:
    """Refuses renamed weights whose shapes are not the config's, naming up to five by the
    source's names (``theirs``) and the shape the source would have had (``their_shape``)."""
    wrong = [
        f"{theirs(k)} {tuple(np.shape(v))} (expected {their_shape(theirs(k), shapes[k])})"
        for k, v in placed.items()
        if tuple(np.shape(v)) != tuple(shapes[k])
    ]
    if wrong:
        raise ForeignLayoutError(
            f"these {what} have other shapes than that config's: "
            + "; ".join(wrong[:5])
            + (f" and {len(wrong) - 5} more" if len(wrong) > 5 else ""),
            unplaced=[w.split(" ")[0] for w in wrong],
        )


def head_count(said: int | None, where: str, given: int | None, width: int, model: str, config: str) -> int:
    """The attention head count of imported weights, which no tensor shape shows: the one their
    ``config.json`` says (``said``, at ``where``) or the one the user gives (``given``: ``zoo
    import --num-heads``), the same where both are. With neither it is refused, not guessed
    from the width: a 384-wide model has 6 heads or 12, and the other count computes other
    attention from the same tensors."""
    if said is None:
        if given is None:
            raise ForeignLayoutError(
                f"the weights do not say how many attention heads their width-{width} {model} has (no "
                f"tensor shape shows it); pass zoo import --num-heads N (num_heads=N in Python), or put "
                f"{config} beside the weights"
            )
        return given
    if given is not None and given != said:
        raise ForeignLayoutError(f"--num-heads {given} disagrees with config.json's {where} {said}")
    return said


def with_source(written: dict[str, Any], source: Mapping[str, Any] | None, modelled: Iterable[str]) -> dict:
    """A ``config.json`` a format derives from zoo's config (``written``), with every field of
    the one the checkpoint was imported from (``source``) that zoo's config does not model as the
    source had it, in the source's order: an export gives back the activation's name, the
    special token ids and the label names it read. ``modelled`` are the fields zoo's config
    decides, written as zoo has them."""
    if not source:
        return written
    modelled = set(modelled)
    merged = {
        key: written[key] if key in modelled else value
        for key, value in source.items()
        if key not in modelled or key in written
    }
    return merged | {key: value for key, value in written.items() if key not in merged}


def causal_lm_parts(
    tensors: Mapping[str, np.ndarray], model: str, prefix: str = "model.", head: str = "lm_head.weight"
) -> tuple[dict[str, np.ndarray], np.ndarray | None, bool]:
    """A transformers ``*ForCausalLM`` or base ``*Model`` state dict -> its backbone's tensors
    without ``prefix``, the ``head`` tensor if any, and whether the keys were prefixed (a
    ``*ForCausalLM``); keys that mix both forms are refused, naming ``model``."""
    tensors = dict(tensors)
    found = tensors.pop(head, None)
    prefixed = any(key.startswith(prefix) for key in tensors)
    if prefixed:
        unprefixed = [key for key in tensors if not key.startswith(prefix)]
        if unprefixed:
            raise ForeignLayoutError(
                f"{model} weights mix {prefix}-prefixed keys with others: {_some(unprefixed)}", unprefixed
            )
        tensors = {key.removeprefix(prefix): value for key, value in tensors.items()}
    return tensors, found, prefixed


def check_tied_head(
    tied: bool, head: np.ndarray | None, embedding: np.ndarray, name: str = "lm_head.weight"
) -> None:
    """A causal LM's head against ``tie_word_embeddings``: untied, the file must carry it; tied,
    a head the file carries anyway must be the embedding (it is dropped), or is refused."""
    if not tied:
        if head is None:
            raise ForeignLayoutError(
                f"config.json's tie_word_embeddings is false but the file has no {name}", missing=[name]
            )
        return
    if head is not None and not np.array_equal(head, embedding):
        raise ForeignLayoutError(
            f"{name} differs from model.embed_tokens.weight although config.json ties them "
            "(tie_word_embeddings true): set tie_word_embeddings false in config.json if the head is its own",
            [name],
        )


def _some(keys: list[str], limit: int = 5) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def resolve(target: str) -> Callable[..., Any]:
    """The callable a ``"module:attribute"`` target names, imported now (a family's pieces
    and formats are named this way so that listing them imports no framework)."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)
