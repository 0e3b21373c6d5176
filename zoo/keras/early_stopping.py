"""trainer.early_stopping in Keras: zoo's rule (zoo.early_stopping) where Keras' ``EarlyStopping``
would judge (``on_epoch_end``, validation done), and the best epoch's weights exported as it is
reached. Keras' own callback resets its counter at every ``fit`` call, which zoo makes several of
(a mid-epoch resume, ``trainer.max_steps``); this one keeps it, and in the training states."""

from __future__ import annotations

import keras

from zoo.early_stopping import EarlyStopping, value_of


class StopEarly(keras.callbacks.Callback):
    """Judges each epoch's monitored metric; at a new best exports ``twin`` (``export``: zoo.runs.
    export.best_exporter, None where this process writes nothing); stops ``fit`` once the patience
    runs out. Goes before SaveState, whose epoch-end state then holds this epoch's decision."""

    def __init__(self, early: EarlyStopping, twin, export=None):
        super().__init__()
        self.early, self.twin, self.export = early, twin, export

    def on_epoch_end(self, epoch, logs=None):
        logs = {f"train_{k}" if not k.startswith("val_") else k: v for k, v in (logs or {}).items()}
        value = value_of(logs, self.early.monitor)
        if self.early.update(epoch + 1, value) and self.export is not None:
            self.export(self.twin, epoch + 1, self.early.monitor, value)
        if self.early.stopped:
            self.model.stop_training = True
