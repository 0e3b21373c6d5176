"""zoo's Lightning callbacks run as one CallbackGroup: each hook reaches the members that
implement it, in order, and Lightning sees one callback."""

from __future__ import annotations

import lightning as L

from zoo.lightning.callbacks import HOOKS, CallbackGroup


class Recorder(L.Callback):
    def __init__(self, name: str, calls: list):
        self.name, self.calls = name, calls

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.calls.append((self.name, "on_train_batch_end", batch_idx))


class EpochRecorder(Recorder):
    def on_train_epoch_end(self, trainer, pl_module):
        self.calls.append((self.name, "on_train_epoch_end"))


def test_each_hook_calls_the_members_that_implement_it_in_order():
    calls: list = []
    group = CallbackGroup(Recorder("a", calls), EpochRecorder("b", calls), L.Callback())
    group.on_train_batch_end(None, None, None, None, 7)
    group.on_train_epoch_end(None, None)
    assert calls == [
        ("a", "on_train_batch_end", 7),
        ("b", "on_train_batch_end", 7),
        ("b", "on_train_epoch_end"),
    ]


def test_a_hook_no_member_implements_stays_lightnings_empty_one():
    group = CallbackGroup(Recorder("a", []))
    implemented = {hook for hook in HOOKS if hook in vars(group)}
    assert implemented == {"on_train_batch_end"}
    assert type(group).on_before_backward is L.Callback.on_before_backward


def test_hooks_are_every_callback_hook_lightning_calls():
    assert {"on_train_batch_start", "on_train_batch_end", "on_before_backward", "on_after_backward",
            "on_before_optimizer_step", "on_before_zero_grad", "on_save_checkpoint", "on_load_checkpoint",
            "on_exception", "setup", "teardown"} <= set(HOOKS)  # fmt: skip
    assert "state_dict" not in HOOKS and "load_state_dict" not in HOOKS
