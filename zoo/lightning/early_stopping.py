"""trainer.early_stopping in Lightning: zoo's rule (zoo.early_stopping), judged where Lightning's own
``EarlyStopping`` judges it with ``check_on_train_epoch_end`` (the epoch's end, validation done),
and the best epoch's weights exported as it is reached. Its state goes in the training states."""

from __future__ import annotations

import lightning as L

from zoo.early_stopping import STATE_KEY, EarlyStopping, value_of


class StopEarly(L.Callback):
    """Judges each epoch's monitored metric; at a new best exports the twin (``export``: zoo.runs.
    export.best_exporter, None on the ranks that write nothing); asks the Trainer to stop once the
    patience runs out. Goes before SaveState, whose epoch-end state then holds this epoch's decision."""

    def __init__(self, early: EarlyStopping, export=None):
        self.early, self.export = early, export

    def on_train_epoch_end(self, trainer, pl_module):
        # callback_metrics: the epoch's train and validation means, reduced over ranks already.
        value = value_of({k: float(v) for k, v in trainer.callback_metrics.items()}, self.early.monitor)
        epoch = trainer.current_epoch + 1
        if self.early.update(epoch, value) and self.export is not None:
            self.export(pl_module.model, epoch, self.early.monitor, value)
        if self.early.stopped:
            trainer.should_stop = True

    def on_train_start(self, trainer, pl_module):
        if self.early.stopped:  # a resumed run that had stopped early: nothing more to train
            trainer.should_stop = True

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint[STATE_KEY] = self.early.state()

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        self.early.restore(checkpoint.get(STATE_KEY))
