"""LightningModules that wrap a plain torch twin with a task's loss, metrics and optimizer.

A batch is ``(x, y)``, or ``(ids, padding_mask, token_types, y)`` for padded text (token
types None where the data has none). Labels ``IGNORE_INDEX`` count in no loss or metric; the
token losses are ``sum / max(count, 1)`` over the counted labels, as zoo.keras.losses computes them.
"""

from __future__ import annotations

import inspect
import math

import lightning as L
import torch
import torch.nn.functional as F
from torchmetrics.functional.classification import multiclass_accuracy, multiclass_stat_scores

from zoo.data import IGNORE_INDEX
from zoo.lightning.optim import build_optimizer, build_scheduler
from zoo.metrics_file import MACRO_F1, PERPLEXITY, top_k


class Task(L.LightningModule):
    """Shared training/validation/test logic; subclasses define ``loss_and_metrics``.

    Epoch metrics are sums kept on the device and logged once per epoch: a ``self.log``
    per step costs ~0.45 ms, more than a tenth of a small model's step on a CPU, and
    reading a value per step would make a GPU wait.
    """

    METRIC = "accuracy"  # the name the task's metric is logged under, unless ``metric`` says another

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer_cfg,
        lr_table,
        compiled: bool = False,
        groups=None,
        metric=None,
        label_smoothing: float = 0.0,
        extra: tuple[str, ...] = (),
    ):
        super().__init__()
        self.extra = tuple(extra)  # trainer.metrics: top-k accuracy, macro F1, perplexity
        self.top_ks = [k for k in map(top_k, self.extra) if k is not None]
        self.batch_counts: torch.Tensor | None = None  # macro F1: the batch's (tp, fp, fn) per class
        self.label_smoothing = label_smoothing  # trainer.label_smoothing: in the loss, not in bits
        self.last_step: int | None = None  # the run's last step where trainer.max_steps sets it
        self.model = model
        self.metric = metric or self.METRIC
        self.groups = groups
        self.optimizer_cfg = optimizer_cfg
        self.lr_table = lr_table
        # The compiled wrapper shares the model's parameters; the plain module stays the one
        # that is exported, so checkpoint names never get torch.compile's prefix.
        self.net = torch.compile(model) if compiled else model
        self.sums: dict[str, EpochSums] = {}
        self.takes_token_types = "token_type_ids" in inspect.signature(model.forward).parameters

    def __setattr__(self, name: str, value) -> None:
        # Lightning sets this around each of the ~45 hook calls of a step; nn.Module's
        # __setattr__ checks parameters, buffers and submodules first (1.7 µs against 0.2).
        if name == "_current_fx_name":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def forward(
        self,
        x: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        token_types: torch.Tensor | None = None,
    ) -> torch.Tensor:
        extra = {}
        if padding_mask is not None:
            extra["padding_mask"] = padding_mask
        if token_types is not None:
            if not self.takes_token_types:
                raise TypeError(
                    f"{type(self.model).__name__} takes no token_type_ids; sentence pairs need a family "
                    "whose twin takes token types"
                )
            extra["token_type_ids"] = token_types
        return self.net(x, **extra)

    def logits_and_labels(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's output on a batch of either form, and the batch's labels."""
        *inputs, y = batch
        return self(*inputs), y

    def loss_and_metrics(self, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
        raise NotImplementedError

    def _step(self, batch, stage: str) -> torch.Tensor:
        loss, metrics, n = self.loss_and_metrics(batch)
        if stage not in self.sums:
            self.sums[stage] = EpochSums(["loss", *metrics], self.extra)
        self.sums[stage].add([loss, *metrics.values()], n, self.batch_counts)
        return loss

    def _log_epoch(self, stage: str) -> None:
        sums = self.sums.pop(stage, None)
        if sums is None:
            return
        for name, value in sums.means(self.trainer.strategy).items():
            # batch_size=1: the value is already the mean; Lightning would multiply and divide.
            self.log(f"{stage}_{name}", value, prog_bar=True, on_step=False, on_epoch=True, batch_size=1)

    def on_train_epoch_start(self):
        self.sums.pop("train", None)  # an epoch cut short (a stop, a limit) must not leak into the next

    def training_step(self, batch, batch_idx):
        loss = self._step(batch, "train")
        # Logged from the last step rather than on_train_epoch_end: callbacks (the metrics
        # CSV, the progress bar) run their epoch-end hooks before the module's.
        if self.trainer.is_last_batch:
            self._log_epoch("train")
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        trainer = self.trainer
        if self.last_step is None or trainer.global_step < self.last_step:
            return
        if not trainer.is_last_batch:
            # trainer.max_steps ends the run inside an epoch: that part is an epoch as Keras' fit
            # ends it (zoo.schedule.epoch_spans), its train metrics logged, and (a stop asked for)
            # validated.
            self._log_epoch("train")
        trainer.should_stop = True

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def on_validation_epoch_end(self):
        self._log_epoch("val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def on_test_epoch_end(self):
        self._log_epoch("test")

    def configure_optimizers(self):
        optimizer = build_optimizer(self.optimizer_cfg, self.groups or self.model.parameters())
        scheduler = build_scheduler(optimizer, self.lr_table, self.optimizer_cfg.lr)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


class EpochSums:
    """Batch-size-weighted sums of a stage's metrics, on the metrics' device, in at least
    float32 (a bf16 running sum would stop growing after a few hundred steps); with macro F1
    asked for (``extra``: trainer.metrics), the epoch's confusion counts per class."""

    def __init__(self, names: list[str], extra: tuple[str, ...] = ()):
        self.names = names
        self.extra = extra
        self.total: torch.Tensor | None = None
        self.count = 0
        self.counts: torch.Tensor | None = None  # (3, classes): tp, fp, fn

    def add(self, values: list[torch.Tensor], n: int, counts: torch.Tensor | None = None) -> None:
        stacked = torch.stack([v.detach() for v in values])
        stacked = stacked.to(torch.promote_types(stacked.dtype, torch.float32)) * n
        self.total = stacked if self.total is None else self.total + stacked
        self.count += n
        if counts is not None:
            self.counts = counts if self.counts is None else self.counts + counts

    def means(self, strategy) -> dict[str, torch.Tensor]:
        """Means over every batch of every process (data parallel: one all-reduce of sums), and
        the metrics of the epoch as a whole: macro F1 of the confusion counts, perplexity."""
        count = torch.tensor([self.count], dtype=self.total.dtype, device=self.total.device)
        totals = strategy.reduce(torch.cat([self.total, count]), reduce_op="sum")
        means = dict(zip(self.names, totals[:-1] / totals[-1], strict=True))
        if MACRO_F1 in self.extra and self.counts is not None:
            means[MACRO_F1] = macro_f1(strategy.reduce(self.counts, reduce_op="sum"))
        if PERPLEXITY in self.extra:  # exp of the mean cross-entropy: the bits (names[1]) in nats
            means[PERPLEXITY] = torch.exp(means[self.names[1]].double() * math.log(2)).float()
        return means


def macro_f1(counts: torch.Tensor) -> torch.Tensor:
    """Macro F1 of (tp, fp, fn) counts per class: 2tp / (2tp + fp + fn) averaged over the classes
    that occur among the labels or the predictions (zoo.metrics_file; scikit-learn's rule)."""
    tp, fp, fn = counts.double()
    seen = (tp + fp + fn) > 0
    f1 = 2 * tp[seen] / (2 * tp[seen] + fp[seen] + fn[seen])
    return (f1.mean() if len(f1) else torch.zeros((), dtype=torch.float64)).float()


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy over the labels that count (not ``IGNORE_INDEX``); 0 when none do.
    ``smoothing``: torch's ``label_smoothing``, over the counted labels only."""
    flat = labels.reshape(-1)
    total = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), flat, ignore_index=IGNORE_INDEX, reduction="sum",
        label_smoothing=smoothing,
    )  # fmt: skip
    return total / (flat != IGNORE_INDEX).sum().clamp(min=1)


def token_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Share of the counted labels predicted right."""
    keep = labels != IGNORE_INDEX
    right = (logits.argmax(-1) == labels) & keep
    return right.sum().float() / keep.sum().clamp(min=1)


class ClassificationTask(Task):
    def loss_and_metrics(self, batch):
        logits, y = self.logits_and_labels(batch)
        loss = F.cross_entropy(logits, y, label_smoothing=self.label_smoothing)
        accuracy = (logits.argmax(-1) == y).float().mean()
        metrics = {self.metric: accuracy}
        classes = logits.shape[-1]
        for k in self.top_ks:  # the share of samples whose label is among the k highest logits
            metrics[f"top{k}_accuracy"] = multiclass_accuracy(
                logits.detach(), y, classes, top_k=k, average="micro", validate_args=False
            )
        if MACRO_F1 in self.extra:
            scores = multiclass_stat_scores(logits.detach(), y, classes, average=None, validate_args=False)
            self.batch_counts = scores[:, [0, 1, 3]].T.to(torch.float64)  # tp, fp, fn per class
        return loss, metrics, len(y)


class LanguageModelTask(Task):
    """Next-token cross-entropy over every counted position; its bits (loss / ln 2) are per
    character (``bpc``) or, for a tokenizer's tokens, per token (``metric="bpt"``)."""

    METRIC = "bpc"

    def loss_and_metrics(self, batch):
        logits, y = self.logits_and_labels(batch)
        loss = token_cross_entropy(logits, y, self.label_smoothing)
        nats = token_cross_entropy(logits, y) if self.label_smoothing else loss
        # a mixture of experts' load-balancing term (training forwards only), in the loss as Keras'
        # fit adds the model's add_loss terms; the bits stay the cross-entropy's
        auxiliary = getattr(self.model, "auxiliary_loss", None)
        if auxiliary is not None:
            loss = loss + auxiliary
        return loss, {self.metric: nats / math.log(2)}, len(y)


class TokenTask(Task):
    """A label per token (token classification, masked language modeling): cross-entropy and
    accuracy over the counted tokens; epoch means weight each batch by its samples, as Keras'
    loss tracker does."""

    def loss_and_metrics(self, batch):
        logits, y = self.logits_and_labels(batch)
        loss = token_cross_entropy(logits, y, self.label_smoothing)
        return loss, {self.metric: token_accuracy(logits, y)}, len(y)


TASKS = {
    "classification": ClassificationTask,
    "language_modeling": LanguageModelTask,
    "token_classification": TokenTask,
    "masked_language_modeling": TokenTask,
}
