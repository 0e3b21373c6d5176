"""What ``zoo compare`` holds at once: each array and optimizer state only while it is used.

A GPT-2 comparison grew past 16 GB while its estimate said 9.6: gradients left on the twins,
optimizer state kept between checks, a second Keras optimizer per twin, float64 copies of the
weights for each update, and the parity pairs alive through the speed section. One small
comparison, watched from inside, shows each of them gone; zoo.peak_memory counts what remains.
"""

from __future__ import annotations

import gc
import weakref

import pytest
from compare_cases import RECIPE


@pytest.fixture(scope="module")
def watched():
    """One comparison with training and speed, and what its sections held as they ran."""
    import keras

    from zoo.compare import compare, resync, speed, transfer, twins

    seen = {"pairs": [], "pass_gradients": [], "built_optimizers": [], "after_update": [], "snapshots": []}
    originals = {
        "build_twins": twins.build_twins, "torch_pass": resync.torch_pass, "step": transfer.Updater.step,
        "check": resync.Checker.check, "measure_speed": speed.measure_speed,
    }  # fmt: skip

    def build(*args, **kwargs):
        pair = originals["build_twins"](*args, **kwargs)
        seen["pairs"].append(weakref.ref(pair.torch_model))
        return pair

    def torch_pass(task, *args):
        found = originals["torch_pass"](task, *args)
        seen["pass_gradients"].append(sum(p.grad is not None for p in task.parameters()))
        return found

    def step(self, gradients):
        gc.collect()
        live = [o for o in gc.get_objects() if isinstance(o, keras.optimizers.Optimizer) and o.built]
        seen["built_optimizers"].append(len(live))
        del live
        originals["step"](self, gradients)
        grads = sum(p.grad is not None for p in self.twins.torch_model.parameters())
        seen["after_update"].append((grads, len(self.torch.state)))

    def check(self, step, batch, state):
        if state is not None:
            seen["snapshots"].append({str(v.dtype) for v in state.tensors.values() if v.dtype.kind == "f"})
        return originals["check"](self, step, batch, state)

    def measure_speed(*args, **kwargs):
        gc.collect()
        seen["alive_at_speed"] = [ref() is not None for ref in seen["pairs"]]
        return originals["measure_speed"](*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(twins, "build_twins", build)
        patch.setattr(resync, "torch_pass", torch_pass)
        patch.setattr(transfer.Updater, "step", step)
        patch.setattr(resync.Checker, "check", check)
        patch.setattr(speed, "measure_speed", measure_speed)
        seen["result"] = compare(RECIPE, steps=2, speed_steps=2, write=False)
    return seen


def test_the_comparison_passes(watched):
    assert watched["result"].passed, watched["result"].text


def test_a_pass_leaves_no_gradient_on_the_twin(watched):
    """The pass copies its gradients out; left on a float64 twin they are a model's worth."""
    assert watched["pass_gradients"] and set(watched["pass_gradients"]) == {0}


def test_an_update_leaves_no_gradient_or_optimizer_state(watched):
    """The next update loads its state from a snapshot: nothing of this one is read again."""
    assert watched["after_update"] and set(watched["after_update"]) == {(0, 0)}


def test_each_pair_holds_one_keras_optimizer_at_an_update(watched):
    """The training section compiles each Keras twin anew; the update's optimizer replaces that
    compile's instead of living beside it (four optimizers' slots, two of them float64, before)."""
    assert watched["built_optimizers"] and max(watched["built_optimizers"]) <= 2


def test_a_float32_pair_is_snapshotted_in_float32(watched):
    assert watched["snapshots"] and all(found == {"float32"} for found in watched["snapshots"])


def test_the_parity_pairs_are_freed_before_the_speed_section(watched):
    assert len(watched["pairs"]) == 2  # the recipe's pair and its float64 reference
    assert watched["alive_at_speed"] == [False, False]


def test_a_forward_check_builds_no_optimizer_slots(monkeypatch, tmp_path):
    """Without an update an updater needs its optimizer only to compile the twin's loss. The
    report has the sections that ran, and no loss curves."""
    from zoo.compare import compare, transfer

    updaters = []
    init = transfer.Updater.__init__

    def spy(self, *args):
        init(self, *args)
        updaters.append(self)

    monkeypatch.setattr(transfer.Updater, "__init__", spy)
    result = compare(RECIPE, forward_only=True, out=tmp_path / "report")
    assert result.passed, result.text
    assert len(updaters) == 2 and not any(u.keras.built for u in updaters)
    assert list(result.verdicts) == ["weights", "forward", "gradients"]
    assert "3 of 3 parity sections pass" in result.text
    assert sorted(result.files) == ["json", "md"] and "## Training" not in result.files["md"].read_text()
