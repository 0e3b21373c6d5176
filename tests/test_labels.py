"""Class labels a classifier trains on: one class only, a label past the class bound (CSV lines in
every family that reads token ids, npz arrays, every family's num_classes), and token ids given to
a classifier of features are each refused in one line naming the file, line or field, before a run
folder is made."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_helpers import sets, zoo
from conftest import RECIPE, tiny

from zoo import registry


def labelled(tmp_path: Path, labels: list) -> Path:
    words = ["alpha beta", "gamma delta", "epsilon zeta", "eta theta"]
    path = tmp_path / "labels.csv"
    path.write_text("text,label\n" + "".join(f"{words[i % 4]} {i},{v}\n" for i, v in enumerate(labels)))
    return path


def train_text(tmp_path: Path, architecture: str, path: Path) -> tuple[int, str]:
    text = ["data.name=text_classification", "data.tokenizer=char", f"data.path={path}"]
    return zoo("train", str(RECIPE), *sets(*tiny(tmp_path, f"model.architecture={architecture}", *text)))


def token_classifiers() -> list[str]:
    from zoo.recipe.schema import classifies_token_ids

    return [name for name, family in registry.families().items() if classifies_token_ids(family)]


@pytest.mark.parametrize("label, shown", [("0", "0"), ("spam", "'spam'")], ids=["ids", "names"])
def test_text_classification_with_one_class_is_refused(tmp_path, label, shown):
    path = labelled(tmp_path, [label] * 40)
    code, out = train_text(tmp_path, "lstm-small", path)
    assert code == 2 and f"{path}: all 40 examples have the label {shown};" in out, out
    assert "needs at least two classes" in out and "Traceback" not in out
    assert [p.name for p in tmp_path.iterdir()] == ["labels.csv"]


@pytest.mark.parametrize("family", token_classifiers())
def test_a_label_past_the_class_bound_is_refused_with_its_line_in_every_family(tmp_path, family):
    labels = [i % 2 for i in range(40)]
    labels[8] = 10**12
    path = labelled(tmp_path, labels)
    code, out = train_text(tmp_path, family, path)
    assert code == 2 and f"{path}, line 10: label '1000000000000' is past 999,999" in out, out


def test_every_family_bounds_its_class_count():
    for name, family in registry.families().items():
        if "num_classes" not in family.config.model_fields:
            continue
        with pytest.raises(ValueError, match="less than or equal to 1000000"):
            family.config.model_validate({"architecture": name, "num_classes": 10**12})


def test_npz_labels_past_the_class_bound_name_the_array_and_index(tmp_path):
    x = np.zeros((6, 8, 8), np.float32)
    y = np.array([0, 1, 0, 1, 10**12, 1])
    np.savez(tmp_path / "d.npz", x_train=x, y_train=y, x_test=x, y_test=y % 2)
    code, out = zoo(
        "train", str(RECIPE), *sets(*tiny(tmp_path, "data.name=npz", f"data.path={tmp_path / 'd.npz'}"))
    )
    assert code == 2 and "y_train[4] is 1000000000000, past 999,999" in out, out


@pytest.mark.parametrize("architecture", ["transformer-tiny", "convnet-tiny"])
def test_a_classifier_that_cannot_read_token_ids_is_refused_at_validation(architecture):
    overrides = [f"model.architecture={architecture}", "data.name=text_classification", "data.tokenizer=char"]
    code, out = zoo("validate", str(RECIPE), *sets(*overrides))
    works = token_classifiers()
    assert code == 2 and f"model.architecture: '{architecture}' classifies" in out, out
    assert "data.name 'text_classification' gives token ids (data.tokenizer 'char')" in out
    assert f"reads token ids: {', '.join(works)}" in out
    for family in works:  # what the message offers does validate
        code, out = zoo("validate", str(RECIPE), *sets(*overrides[1:], f"model.architecture={family}"))
        assert code == 0, out
