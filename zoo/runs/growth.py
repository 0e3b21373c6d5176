"""A run whose training loss exploded while staying a number.

A non-finite loss stops a run (zoo.runs.stops.NonFiniteLoss), but a learning rate far too high
can also drive the loss to 1e30 and keep it finite: the run ends, exports and tests (test loss
7.7e30, accuracy at chance) as if it had trained. zoo compares the last epoch's mean training
loss with the loss of the run's first batch (before any update): a loss that grew more than
:data:`GROWTH_LIMIT` times, to more than :data:`LOSS_FLOOR`, is reported as exploded, with a
warning on stderr and ``loss_exploded`` in ``summary.json``. The run still counts as finished (its
checkpoint holds numbers, and ``zoo evaluate`` says what they are worth).
"""

from __future__ import annotations

GROWTH_LIMIT = 1e3
# A cross-entropy this small is no explosion, whatever it started from (a fine-tune of a model
# that already fit its data starts near 0): uniform guessing over 22,000 classes is 10 nats.
LOSS_FLOOR = 10.0


def loss_explosion(first: float | None, rows: list[dict[str, str]]) -> dict | None:
    """What ``summary.json`` records of an exploded loss (first batch's loss, last epoch's mean,
    the factor, a message), or None: the loss did not explode, or the run does not know its first
    batch's loss (resumed from a state saved before zoo kept it)."""
    last = None
    for row in reversed(rows):
        try:
            last, epoch = float(row["train_loss"]), int(row["epoch"])
            break
        except (KeyError, TypeError, ValueError):
            continue
    if first is None or last is None or not first > 0:
        return None
    factor = last / first
    if not (factor > GROWTH_LIMIT and last > LOSS_FLOOR):  # a NaN is no explosion: it stopped the run
        return None
    message = (
        f"the training loss exploded: {last:.3g} in epoch {epoch} (its mean), {factor:.3g} times the "
        f"{first:.3g} of the first batch. The checkpoint is unlikely to be of use: lower optimizer.lr, "
        "add schedule.warmup_steps or trainer.gradient_clip_norm, and train again"
    )
    return {"first_batch_loss": first, "last_epoch_loss": last, "epoch": epoch, "factor": factor,
            "message": message}  # fmt: skip
