"""Text generation from a character language-model checkpoint, in either framework.

Decoding runs in numpy on the logits each framework returns, so the same checkpoint,
prompt and seed give the same text whichever twin computes the logits.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from zoo.checkpoint import CheckpointError, load_checkpoint, read_checkpoint

UNBOUNDED_WINDOW = 256  # tokens re-read per step by a model of unbounded context (a recurrent net)


class PromptError(ValueError):
    """A prompt or sampling setting the model cannot take."""


def sample(
    path: str | Path,
    prompt: str = "",
    length: int = 200,
    temperature: float = 0.0,
    framework: str = "lightning",
    seed: int = 0,
) -> str:
    """``prompt`` followed by ``length`` generated characters; temperature 0 is greedy."""
    checkpoint = read_checkpoint(path)
    if checkpoint.config.active_task != "language_modeling":
        raise CheckpointError(f"{path}: a {checkpoint.family.name} classifier, not a language model")
    vocab = checkpoint.json("task_info", {}).get("vocab")
    if not vocab:
        raise CheckpointError(f"{path}: its metadata has no vocabulary (task_info.vocab)")
    if temperature < 0:
        raise PromptError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
    lookup = {c: i for i, c in enumerate(vocab)}
    unknown = sorted(set(prompt) - set(lookup))
    if unknown:
        raise PromptError(f"the prompt has characters the model never saw: {''.join(unknown)!r}")
    ids = [lookup[c] for c in prompt] or [lookup.get("\n", 0)]
    window = checkpoint.config.context_length() or UNBOUNDED_WINDOW
    forward = _forward(load_checkpoint(path, framework))
    rng = np.random.default_rng(seed)
    generated = []
    for _ in range(length):
        logits = forward(np.asarray([ids[-window:]], dtype=np.int64))[0, -1].astype(np.float64)
        if temperature == 0:
            token = int(np.argmax(logits))
        else:
            scaled = logits / temperature
            probabilities = np.exp(scaled - scaled.max())
            token = int(rng.choice(len(probabilities), p=probabilities / probabilities.sum()))
        ids.append(token)
        generated.append(vocab[token])
    return prompt + "".join(generated)


def _forward(model):
    from zoo.checkpoint import framework_of

    if framework_of(model) == "keras":
        return lambda x: np.asarray(model(x, training=False))
    import torch

    model.eval()

    def run(x):
        with torch.no_grad():
            return model(torch.from_numpy(x)).numpy()

    return run
