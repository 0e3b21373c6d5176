"""``zoo predict``: a checkpoint run on a user's own files, in either framework, with the
preprocessing the checkpoint records.

Inputs are image files (a file, a folder read recursively, a glob), text (a ``.txt`` file, one
example a line; a ``.jsonl`` file, one object a line, read at the checkpoint's text column; or
texts given directly) or ``.npy`` arrays already in the model's canonical layout. Every input
is found and checked before the model is loaded, and what cannot be used (a file that does not
decode, a glob that matches nothing, text for an image model...) is refused in one line naming
it. Then it runs batch by batch under a progress bar on stderr, each kind of model answering as
zoo.predict_outputs describes (top-k labels, tokens filled, texts continued), in numpy on the
logits either twin returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoo.backend import backend_for, framework_name
from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import Checkpoint, read_checkpoint
from zoo.data.preprocessing import of_checkpoint
from zoo.loading import Located, locate
from zoo.predict_inputs import Example, PredictError, batches, gather, reads_text
from zoo.predict_outputs import Model, Prediction, class_labels, classify, generate_texts, model_tokenizer
from zoo.progress import bar
from zoo.sample import Sampling, check_length


@dataclass(frozen=True)
class Predicted:
    """A run of :func:`predict`: the checkpoint file read, its task and the predictions, which
    it iterates and indexes as the list it holds."""

    checkpoint: Path
    task: str
    predictions: list[Prediction]

    def __iter__(self) -> Iterator[Prediction]:
        return iter(self.predictions)

    def __len__(self) -> int:
        return len(self.predictions)

    def __getitem__(self, index: int) -> Prediction:
        return self.predictions[index]


def predict(
    checkpoint: str | Path,
    inputs: str | Path | np.ndarray | Iterable[str | Path] = (),
    *,
    texts: Sequence[str] = (),
    framework: str = "lightning",
    top_k: int = 5,
    batch_size: int = 32,
    length: int = 50,
    temperature: float = 0.0,
    seed: int = 0,
) -> Predicted:
    """Predictions of a checkpoint (or anything :func:`zoo.load` reads from a path: a run
    folder, a transformers / timm folder imported on the fly) for ``inputs`` (image files,
    folders, globs, .txt / .jsonl / .npy files, or a numpy array in the model's layout) and
    ``texts`` given directly, in input order. ``top_k`` labels (or mask fills) are returned
    per input; a language model generates ``length`` tokens (greedy at ``temperature`` 0)."""
    framework = framework_name(framework)
    if top_k < 1 or batch_size < 1:
        raise PredictError(f"top_k and batch_size must be at least 1 (got {top_k} and {batch_size})")
    found, opened = _predicting_checkpoint(checkpoint)
    sampling = None
    if opened.config.active_task == "language_modeling":
        check_length(length)
        sampling = Sampling(temperature, None, None, seed)
    preprocessing = of_checkpoint(opened)
    examples = gather(opened, preprocessing, inputs, texts)
    labels = class_labels(opened, preprocessing)
    model = Model(opened, None, framework == "keras", preprocessing, labels=labels)
    if reads_text(opened):
        model.tokenizer = model_tokenizer(opened, preprocessing)
    model.twin = backend_for(framework).load(opened)
    if not model.keras:
        model.twin.eval()
    results = _predictions(model, examples, batch_size, top_k, length, sampling)
    # a LoRA adapter: the one given
    return Predicted(found.adapter or found.checkpoint, opened.config.active_task, results)


def _predicting_checkpoint(checkpoint: str | Path) -> tuple[Located, Checkpoint]:
    """Where ``checkpoint`` is found (zoo.load's rules) and the checkpoint read there; a name
    without trained weights and a backbone without a head are refused, having nothing to predict."""
    found = locate(checkpoint)
    if found.checkpoint is None:
        raise CheckpointError(
            f"{checkpoint}: names the architecture {found.name!r}, which has no trained weights; zoo "
            "predict takes a checkpoint (a .safetensors file, a run folder, or a folder to import)"
        )
    opened = read_checkpoint(found.checkpoint)
    if opened.config.active_task == "features":
        raise CheckpointError(
            f"{checkpoint}: a {opened.family.name} backbone without a head (task features) predicts "
            "nothing; fine-tune it for a task, or run it with zoo.load"
        )
    return found, opened


def _predictions(
    model: Model, examples: list[Example], batch_size: int, top_k: int, length: int, sampling: Sampling | None
) -> list[Prediction]:
    """Every example's prediction, batch by batch under a progress bar on stderr: a language
    model's continuations (with ``sampling``), any other model's labels or tokens."""
    results: list[Prediction] = []
    with bar(len(examples), "predicting", unit="input") as shown:
        for batch in batches(examples, batch_size):
            if sampling is not None:
                results += generate_texts(model, batch, length, sampling)
            else:
                results += classify(model, batch, top_k)
            shown.update(len(batch))
    return results
