"""Input a model cannot take, refused with the same message by both twins.

torch and Keras disagree about bad input: torch raises on a token id outside the
vocabulary where Keras' ``take`` wraps a negative id round to the last row, and torch
refuses BatchNorm statistics over a single value where Keras computes them. zoo's
building blocks check such input themselves and raise :class:`InputError` with one of
the messages built here, whichever framework runs.

Inside a TensorFlow graph (``fit``, ``tf.function``) a check cannot raise a Python
exception: it fails the step with a ``tf.errors.InvalidArgumentError`` whose text holds
the same message. :func:`input_error` finds it there again, so a command line can report
both frameworks' failures the same way.
"""

from __future__ import annotations

import re

from zoo.errors import DataError

# Each message ends with a fixed phrase, so it can be cut out of a framework's error text.
_TOKEN_IDS_END = "check the tokenizer/vocabulary or raise vocab_size"
_BATCHNORM_END = "use a larger batch or evaluation mode"
_LENGTH_END = "raise model.max_len or shorten the sequences"
_PATTERNS = tuple(
    re.compile(pattern)
    for pattern in (
        rf"token ids must lie in \[0, \d+\) .*?{re.escape(_TOKEN_IDS_END)}",
        rf"BatchNorm in training needs more than one value per channel.*?{re.escape(_BATCHNORM_END)}",
        rf"sequence (?:of \d+ steps )?(?:is )?longer than max_len \d+.*?{re.escape(_LENGTH_END)}",
    )
)


# A graph assertion's message travels between these markers (zoo.nn.keras.checks.require), so
# any check's words, a family's own included, are found again in TensorFlow's error text.
GRAPH_MARK, GRAPH_END = "[zoo input] ", " [/zoo input]"
_MARKED = re.compile(re.escape(GRAPH_MARK) + "(.*?)" + re.escape(GRAPH_END), re.DOTALL)


class InputError(DataError):
    """A batch the model cannot take: what is wrong, and what would work.

    A ``DataError`` (so a ``ValueError``): the ``zoo`` command reports it as a user error.
    """

    # Raised while TensorFlow traces a graph, or from a Keras layer's call, an exception is
    # re-raised as another type (AutoGraph's StagingError) or with the call's arguments
    # appended to its message, unless it carries these markers. With them it arrives as it
    # was raised: the same type and the same words as from the torch twin.
    ag_pass_through = True
    _keras_call_info_injected = True


def token_ids_message(vocab_size: int) -> str:
    return (
        f"token ids must lie in [0, {vocab_size}) (the model's vocab_size); got ids outside it: "
        f"{_TOKEN_IDS_END}"
    )


def batchnorm_message(spatial_dims: int) -> str:
    """The message for a training batch with one value per channel: a batch of 1 whose
    ``spatial_dims`` spatial sizes (2 for an image's H and W) are all 1."""
    if spatial_dims == 0:
        got = "a batch of 1"
    elif spatial_dims == 1:
        got = "a batch of 1 with length-1 sequences"
    else:
        got = f"a batch of 1 with {'x'.join('1' * spatial_dims)} feature maps"
    return f"BatchNorm in training needs more than one value per channel; got {got}: {_BATCHNORM_END}"


def sequence_length_message(max_len: int, steps: int | None = None) -> str:
    """``steps`` is left out where only a graph knows it (a Keras batch of unknown length)."""
    got = f"sequence of {steps} steps is" if steps is not None else "sequence"
    return f"{got} longer than max_len {max_len}; {_LENGTH_END}"


def input_error(error: BaseException) -> InputError | None:
    """``error`` as an :class:`InputError` if it carries one of this module's messages.

    An ``InputError`` comes back as it is; a framework's own error (TensorFlow's
    ``InvalidArgumentError`` from a graph assertion, torch's ``RuntimeError`` from an
    asynchronous assertion) becomes an ``InputError`` with just the message. Anything else
    gives ``None``.
    """
    if isinstance(error, InputError):
        return error
    text = str(error)
    marked = _MARKED.search(text)
    if marked:
        return InputError(marked.group(1).replace("\\'", "'"))
    for pattern in _PATTERNS:
        found = pattern.search(text)
        if found:
            return InputError(found.group(0).replace("\\'", "'"))  # TensorFlow escapes quotes
    return None
