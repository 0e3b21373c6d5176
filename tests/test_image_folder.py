"""The image_folder source: classes, splits, bad files, torchvision's pixels, and the same
decoded (and augmented) batches in both frameworks, resumed where they stopped."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest
from PIL import Image

import zoo
from zoo import registry
from zoo.data import DataError, load_dataset
from zoo.data import pixels as px
from zoo.data.digits import write_digits_folder
from zoo.recipe.image_data import ImageFolderData

CLASSES = ("cat", "dog", "emu")  # folder names; "emu" gets the JPEGs and a nested folder


def make_folder(root, per_class: int = 10, seed: int = 0):
    """``per_class`` random images of random sizes in each class folder, plus files that are not
    images (a note, a hidden file, a hidden folder): they must be ignored."""
    rng = np.random.default_rng(seed)
    for c, name in enumerate(CLASSES):
        folder = root / name
        (folder / "more").mkdir(parents=True)
        for i in range(per_class):
            h, w = rng.integers(18, 40, size=2)
            pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            pixels[..., c] = 255  # each class leans to its own colour
            where = folder / "more" if i == 0 else folder
            if name == "emu" and i < 2:
                Image.fromarray(pixels).save(where / f"{i:02d}.JPG", quality=85)
            elif i == per_class - 1:
                Image.fromarray(pixels).convert("L").save(where / f"{i:02d}.png")
            else:
                Image.fromarray(pixels).save(where / f"{i:02d}.png")
    (root / "cat" / "notes.txt").write_text("not an image")
    (root / "dog" / ".hidden.png").write_bytes(b"not an image either")
    (root / ".cache").mkdir()
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("images"))


def config(root, **fields) -> ImageFolderData:
    return ImageFolderData(root=root, **{"image_size": 16, "resize": 20, "workers": 0, **fields})


def test_classes_are_sorted_folder_names_and_every_image_is_found(folder):
    data = load_dataset(config(folder, val_fraction=0.0, test_fraction=0.1), "image")
    assert data.classes == CLASSES
    assert data.info == {"task": "classification", "in_channels": 3, "image_size": 16, "num_classes": 3}
    splits = (data.train, data.val, data.test)
    assert sum(len(s) for s in splits) == 30 and len(data.val) == 0
    for split in splits:
        for i, label in enumerate(split.y):
            assert split.x.path(i).relative_to(folder).parts[0] == CLASSES[label]
    paths = {str(s.x.path(i).relative_to(folder)) for s in splits for i in range(len(s))}
    assert {"cat/more/00.png", "emu/01.JPG", "emu/more/00.JPG"} <= paths  # nested, upper-case suffix
    assert not any(p.endswith((".txt", ".hidden.png")) for p in paths)
    x = data.train.x[np.arange(4)]
    assert x.shape == (4, 3, 16, 16) and x.dtype == np.float32 and data.train.x.shape[1:] == (3, 16, 16)


def test_carved_splits_are_stratified_seeded_and_disjoint(folder):
    data = load_dataset(config(folder, val_fraction=0.2, test_fraction=0.3), "image")
    counts = [np.bincount(s.y).tolist() for s in (data.train, data.val, data.test)]
    assert counts == [[5] * 3, [2] * 3, [3] * 3]
    paths = [{str(s.x.path(i)) for i in range(len(s))} for s in (data.train, data.val, data.test)]
    assert sum(len(p) for p in paths) == len(set().union(*paths)) == 30
    again = load_dataset(config(folder, val_fraction=0.2, test_fraction=0.3), "image")
    np.testing.assert_array_equal(again.test.x.files, data.test.x.files)
    other = load_dataset(config(folder, val_fraction=0.2, test_fraction=0.3, split_seed=1), "image")
    assert not np.array_equal(other.test.x.files, data.test.x.files)


def test_split_folders_and_their_errors(tmp_path):
    root, aside = tmp_path / "root", tmp_path / "aside"
    make_folder(root / "train", per_class=6)
    make_folder(root / "test", per_class=2, seed=1)
    aside.mkdir()
    (root / "test" / "dog").rename(aside / "dog")  # a test split may lack a class
    data = load_dataset(config(root, val_fraction=0.49), "image")
    assert np.bincount(data.test.y).tolist() == [2, 0, 2]
    assert np.bincount(data.val.y).tolist() == [3, 3, 3] and len(data.train) == 9  # round(0.49 * 6)
    assert all(data.test.x.path(i).is_relative_to(root / "test") for i in range(len(data.test)))

    with pytest.raises(DataError, match=r"data.test_fraction is set, but .*test is the test split"):
        load_dataset(config(root, test_fraction=0.2), "image")
    (aside / "dog").rename(root / "test" / "wolf")
    with pytest.raises(DataError, match=r"test has class folders that train/ lacks: wolf"):
        load_dataset(config(root), "image")
    (root / "test" / "wolf").rename(root / "wolf")
    with pytest.raises(DataError, match=r"has train/ next to other folders \(wolf\)"):
        load_dataset(config(root), "image")
    with pytest.raises(DataError, match=r"gives images, but the model reads sequences") as refused:
        load_dataset(config(root / "train"), "sequence")
    # What it suggests is what is installed: every family that reads images, and only those.
    suggested = re.search(r"use an image architecture \((.*)\)", str(refused.value)).group(1)
    readers = {name for name, family in registry.families().items() if family.inputs.kind == "image"}
    assert set(suggested.split(", ")) == readers
    for image in (root / "train" / "emu").rglob("*.*"):
        image.unlink()
    (root / "train" / "emu" / "notes.txt").touch()
    with pytest.raises(DataError, match=r"no \.jpg, \.jpeg or \.png images in class folder\(s\) emu"):
        load_dataset(config(root / "train"), "image")


def test_a_bad_file_stops_the_load_naming_it_or_is_skipped_and_counted(tmp_path, caplog):
    root = make_folder(tmp_path / "data", per_class=5)
    (root / "dog" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n but nothing else")
    whole = (root / "cat" / "01.png").read_bytes()
    (root / "cat" / "01.png").write_bytes(whole[: len(whole) // 2])  # a header, half the pixels
    with pytest.raises(DataError, match=r"dog/broken\.png: not a readable image .*1 of 16 file\(s\)"):
        load_dataset(config(root), "image")
    with caplog.at_level(logging.WARNING, logger="zoo"):
        data = load_dataset(config(root, on_bad_file="skip", test_fraction=0.2), "image")
    assert sum(len(s) for s in (data.train, data.val, data.test)) == 15
    assert "skipped 1 of 16 image file(s) that cannot be read" in caplog.text and "broken.png" in caplog.text

    # The header check passes the truncated file; decoding it names it. check_files=decode finds it first.
    split = next(s for s in (data.train, data.val, data.test) if b"cat/01.png" in s.x.files)
    with pytest.raises(DataError, match=r"cat/01\.png: cannot be decoded as an image"):
        split.x[np.arange(len(split))]
    with pytest.raises(DataError, match=r"cat/01\.png: not a readable image"):
        load_dataset(config(root, check_files="decode"), "image")
    data = load_dataset(config(root, on_bad_file="skip", check_files="decode", test_fraction=0.2), "image")
    assert sum(len(s) for s in (data.train, data.val, data.test)) == 14
    for image in (root / "emu").rglob("*.*"):
        image.write_bytes(b"garbage")
    with pytest.raises(DataError, match=r"class folder\(s\) emu have no readable image left"):
        load_dataset(config(root, on_bad_file="skip"), "image")


def test_normalisation_is_torchvision_arithmetic(tmp_path):
    root = tmp_path / "flat"
    for name, colour in (("a", (10, 128, 250)), ("b", (0, 255, 77))):
        (root / name).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (24, 30), colour).save(root / name / f"{i}.png")
    mean, std = (0.5, 0.25, 0.125), (0.5, 2.0, 0.3)
    data = load_dataset(config(root, mean=mean, std=std, test_fraction=0.34, val_fraction=0), "image")
    x = data.train.x[np.arange(len(data.train))]
    for sample, label in zip(x, data.train.y, strict=True):
        colour = np.array(((10, 128, 250), (0, 255, 77))[label], np.float32)
        want = (colour / np.float32(255) - np.float32(mean)) / np.float32(std)
        np.testing.assert_array_equal(sample, np.broadcast_to(want[:, None, None], (3, 16, 16)))
    gray = load_dataset(config(root, channels="grayscale", test_fraction=0.34, val_fraction=0), "image")
    assert gray.info["in_channels"] == 1
    x = gray.train.x[np.arange(len(gray.train))]
    for sample, label in zip(x, gray.train.y, strict=True):
        colour = ((10, 128, 250), (0, 255, 77))[label]
        level = np.float32(np.asarray(Image.new("RGB", (1, 1), colour).convert("L"))[0, 0])
        want = (level / np.float32(255) - np.float32(0.449)) / np.float32(0.226)  # the grayscale defaults
        np.testing.assert_array_equal(sample, np.full((1, 16, 16), want, np.float32))


def test_pixels_match_torchvision():
    """Eval (Resize + CenterCrop, bilinear and bicubic) and training crops (resized_crop + hflip)
    against torchvision's own output on RGB, RGBA, palette, grayscale and JPEG files: the same
    float32 values. The eval transform a torchvision import records is that of torchvision's
    ImageNet ResNet weights."""
    import reference_env

    from architectures.resnet.formats import TORCHVISION_EVAL

    out = reference_env.fixtures("torchvision_image_transforms.py")
    spec = json.loads((out / "cases.json").read_text())
    weights = spec["resnet_eval"]
    assert weights["size"] == [TORCHVISION_EVAL.size] and weights["resize"] == [TORCHVISION_EVAL.resize]
    assert weights["interpolation"] == TORCHVISION_EVAL.interpolation
    assert tuple(weights["mean"]) == TORCHVISION_EVAL.mean and tuple(weights["std"]) == TORCHVISION_EVAL.std
    for case in spec["cases"]:
        gray = case["mode"] == "L"
        pixels = px.Pixels(
            image_size=case["size"],
            resize=case.get("resize", case["size"]),
            mode=case["mode"],
            mean=tuple(spec["gray_mean" if gray else "mean"]),
            std=tuple(spec["gray_std" if gray else "std"]),
            interpolation=case.get("interpolation", "bilinear"),
        )
        image = px.open_image(out / "images" / case["file"], case["mode"])
        if "box" in case:
            array = px.resized_crop(image, tuple(case["box"]), case["size"])
            array = array[:, ::-1] if case["flip"] else array
        else:
            array = px.center(image, pixels)
        ours = px.normalize(array[None], pixels)[0].transpose(2, 0, 1)
        theirs = np.load(out / f"{case['key']}.npy")
        assert ours.shape == theirs.shape, case["key"]
        np.testing.assert_array_equal(ours, theirs, err_msg=case["key"])


def test_random_crops_follow_scale_and_ratio_and_depend_on_the_key_only():
    key = px.epoch_key(seed=5, epoch=2)
    boxes = [px.crop_box(px.sample_rng(key, i), 64, 48, (0.25, 0.5), (0.5, 2.0)) for i in range(300)]
    for top, left, h, w in boxes:
        assert min(top, left) >= 0 and top + h <= 48 and left + w <= 64
        assert 0.24 <= h * w / (64 * 48) <= 0.51 and 0.45 <= w / h <= 2.2  # bounds up to rounding
    assert len(set(boxes)) > 250
    assert px.crop_box(px.sample_rng(key, 7), 64, 48, (0.25, 0.5), (0.5, 2.0)) == boxes[7]
    assert px.crop_box(px.sample_rng(px.epoch_key(5, 3), 7), 64, 48, (0.25, 0.5), (0.5, 2.0)) != boxes[7]


def image_folder_with_augmentation(folder, **fields):
    return load_dataset(config(folder, augment=True, workers=2, test_fraction=0.2, **fields), "image")


def test_both_frameworks_get_bit_identical_batches(folder):
    """Augmented training batches over two epochs (torch DataLoader workers, tf.data parallel map),
    then eval batches; and an augmentation belongs to the sample, not to its batch."""
    from zoo.data import epoch_batches
    from zoo.keras.data import eval_dataset, train_dataset
    from zoo.lightning.data import loader

    data = image_folder_with_augmentation(folder)
    torch_loader = loader(data.train, 7, seed=3, shuffle=True)
    keras_batches = iter(train_dataset(data.train, 7, seed=3, shuffle=True, epochs=2, input_kind="image"))
    seen = []
    for epoch in range(2):
        torch_loader.sampler.set_epoch(epoch)
        for x_t, y_t in torch_loader:
            x_k, y_k = next(keras_batches)
            np.testing.assert_array_equal(y_t.numpy(), y_k.numpy())
            np.testing.assert_array_equal(x_t.numpy().transpose(0, 2, 3, 1), x_k.numpy())
            seen.append(x_t.numpy())
    with pytest.raises(StopIteration):
        next(keras_batches)
    images = data.train.x
    assert not np.array_equal(seen[0], images[epoch_batches(len(data.train), 7, seed=3, epoch=0)[0]])
    alone, with_another = images.batch(np.array([2]), 3, 1), images.batch(np.array([5, 2]), 3, 1)
    np.testing.assert_array_equal(with_another[1], alone[0])
    assert not np.array_equal(alone, images.batch(np.array([2]), 3, 0))  # another epoch, another crop

    for split in (data.val, data.test):
        keras_eval = iter(eval_dataset(split, 4, "image"))
        for x_t, y_t in loader(split, 4):
            x_k, y_k = next(keras_eval)
            np.testing.assert_array_equal(x_t.numpy().transpose(0, 2, 3, 1), x_k.numpy())
            np.testing.assert_array_equal(y_t.numpy(), y_k.numpy())


def test_a_resumed_pipeline_starts_at_the_saved_batch(folder):
    """As Lightning does it: the iterator exists before zoo's ResumePosition sets the epoch and
    the batches to skip; the workers still start there. Keras starts there from its arguments."""
    from zoo.data import epoch_batches
    from zoo.keras.data import train_dataset
    from zoo.lightning.data import loader

    data = image_folder_with_augmentation(folder)
    torch_loader = loader(data.train, 5, seed=1, shuffle=True)
    iterator = iter(torch_loader)
    torch_loader.sampler.set_epoch(1)
    torch_loader.sampler.skip = 2
    x_t, y_t = next(iterator)
    keras = train_dataset(data.train, 5, 1, True, epochs=2, input_kind="image", start_epoch=1, skip=2)
    x_k, y_k = next(iter(keras))
    index = epoch_batches(len(data.train), 5, seed=1, epoch=1)[2]
    np.testing.assert_array_equal(y_t.numpy(), data.train.y[index])
    np.testing.assert_array_equal(x_t.numpy(), data.train.x.batch(index, seed=1, epoch=1))
    np.testing.assert_array_equal(x_t.numpy().transpose(0, 2, 3, 1), x_k.numpy())
    np.testing.assert_array_equal(y_t.numpy(), y_k.numpy())


def test_recipe_fields_are_checked(tmp_path):
    from pydantic import ValidationError

    (tmp_path / "a").mkdir()
    cases = {
        r"data.root '.*nowhere' is not a folder": {"root": tmp_path / "nowhere"},
        r"data.resize 20 is smaller than data.image_size 32": {"image_size": 32, "resize": 20},
        r"data.mean has 3 value\(s\) but data.channels 'grayscale' has 1": {
            "channels": "grayscale", "mean": [0.5, 0.5, 0.5],
        },
        r"data.augment.scale is set but data.augment.random_resized_crop is false": {
            "augment": {"random_resized_crop": False, "scale": [0.5, 1.0]},
        },
        r"data.augment turns every augmentation off": {
            "augment": {"random_resized_crop": False, "horizontal_flip": False},
        },
        r"data.augment.ratio \[2.0, 0.5\] is not a range": {"augment": {"ratio": [2.0, 0.5]}},
    }  # fmt: skip
    for message, fields in cases.items():
        with pytest.raises(ValidationError, match=message):
            ImageFolderData(**{"root": tmp_path, **fields})
    gray = ImageFolderData(root=tmp_path, channels="grayscale", augment=True)
    assert gray.mean == (0.449,) and gray.std == (0.226,) and gray.augment.scale == (0.08, 1.0)
    assert ImageFolderData(root=tmp_path, augment=False).augment is None


def test_digits_folder_writer(tmp_path):
    root = write_digits_folder(tmp_path / "digits", size=24, per_class=3)
    assert sorted(p.name for p in root.iterdir()) == [str(d) for d in range(10)]
    image = Image.open(next((root / "7").iterdir()))
    assert image.size == (24, 24) and image.mode == "RGB" and len(list(root.rglob("*.png"))) == 30
    jpeg = write_digits_folder(tmp_path / "gray", size=16, rgb=False, per_class=1, image_format="jpeg")
    assert Image.open(next((jpeg / "0").iterdir())).mode == "L"


@pytest.fixture(scope="module")
def digits_folder(tmp_path_factory):
    return write_digits_folder(tmp_path_factory.mktemp("digits"), size=16, per_class=24)


def test_zoo_train_on_an_image_folder_in_both_frameworks(digits_folder, tmp_path):
    """A short run of each framework, with augmentation and decoding workers; each checkpoint
    evaluates to the same accuracy in the other framework on the same decoded test split."""
    recipe = {
        "name": "digits-folder",
        "model": {"architecture": "convnet-tiny"},
        "data": {"name": "image_folder", "root": str(digits_folder), "image_size": 16, "batch_size": 32,
                 "augment": {"scale": [0.6, 1.0]}, "workers": 2, "mean": [0.5] * 3, "std": [0.5] * 3},
        "optimizer": {"lr": 0.01},
        "trainer": {"max_epochs": 2, "progress_bar": False},
        "export": {"dir": str(tmp_path)},
    }  # fmt: skip
    for framework, other in (("lightning", "keras"), ("keras", "lightning")):
        result = zoo.train(recipe, framework=framework)
        assert [row["step"] for row in result.history] == ["7", "14"]  # 200 training images / 32
        assert 0 <= result.metrics["test_accuracy"] <= 1
        resolved = zoo.load_recipe(result.run_dir / "recipe.yaml")
        model = resolved.model
        assert (model.in_channels, model.image_size, model.num_classes) == (3, 16, 10)
        evaluated = zoo.evaluate(result.checkpoint, recipe, framework=other)
        assert evaluated["test_accuracy"] == pytest.approx(result.metrics["test_accuracy"], abs=1e-6)


def test_compare_reads_an_image_folder(digits_folder):
    comparison = zoo.compare(
        {"model": {"architecture": "convnet-tiny"},
         "data": {"name": "image_folder", "root": str(digits_folder), "image_size": 16, "workers": 0}},
        steps=2, speed_steps=0, write=False,
    )  # fmt: skip
    assert comparison.passed and comparison.report["sections"]["training"]["steps"] == 2


def test_chosen_classes_and_few_shot_training_images(folder):
    dataset = load_dataset(config(folder, classes=["emu", "cat"], train_per_class=2), "image")
    assert dataset.classes == ("emu", "cat") and dataset.info["num_classes"] == 2
    assert np.bincount(dataset.train.y).tolist() == [2, 2]
    again = load_dataset(config(folder, classes=["emu", "cat"], train_per_class=2), "image")
    assert list(again.train.x.files) == list(dataset.train.x.files)  # seeded: the same images
    with pytest.raises(DataError, match=r"names zebra, which .* has no folder for; it has: cat, dog, emu"):
        load_dataset(config(folder, classes=["cat", "zebra"]), "image")
    with pytest.raises(ValueError, match="names a class twice"):
        config(folder, classes=["cat", "cat"])


def test_without_a_root_the_embedded_digits_are_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    dataset = load_dataset(ImageFolderData(image_size=16, classes=["3", "8"]), "image")
    assert (tmp_path / "digits-16px" / ".complete").is_file()
    assert dataset.info == {"task": "classification", "in_channels": 3, "image_size": 16, "num_classes": 2}
    assert dataset.train.x[np.arange(2)].shape == (2, 3, 16, 16)
