"""Bounded parsers and numbers at their edges (issue 27): JSON and YAML that zoo did not write is
read within the limits of :mod:`zoo.limits` (size, depth, values, alias expansion), each tested
at the limit and one past it, and the CLI's numbers are refused at once, by option, with the
range that works. Every refusal is zoo's own error (exit 2 on the command line, one line), never
a RecursionError, JSONDecodeError, AttributeError or KeyError traceback."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors.numpy import save_file
from test_interchange import foreign_tensors, with_format  # noqa: F401 (with_format: a fixture)

import zoo
from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.cli import main
from zoo.data import DataError, load_dataset
from zoo.hardware import DDP_TIMEOUT_MAX_S, SetupError, check_trainer, ddp_timeout_s
from zoo.interchange import InterchangeError
from zoo.interchange.importing import import_checkpoint
from zoo.limits import (
    MAX_DEPTH,
    MAX_JSON_BYTES,
    MAX_RECIPE_BYTES,
    MAX_RECIPE_VALUES,
    MAX_SAMPLE_LENGTH,
    MAX_SHOWN_PROBLEMS,
    MAX_VOCAB_SIZE,
    depth,
    parse_json,
)
from zoo.recipe import RecipeError, TextClassificationData, TextData, load_recipe
from zoo.recipe.overrides import RefusedYAML, read_yaml
from zoo.runs import RunDir
from zoo.runs.launch import check_launch, is_primary_process
from zoo.runs.listing import read_run
from zoo.sample import PromptError, Sampling, check_length

ROOT = Path(__file__).parent.parent
LM_RECIPE = ROOT / "recipes" / "lstm-charlm.yaml"
BASE = "model: {architecture: convnet-tiny}\n"


def nested(levels: int, inner: str = "1") -> str:
    return "[" * levels + inner + "]" * levels


def invoke(*args: object, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def one_line_refusal(result, *words: str) -> str:
    """The command ended with exit 2 and one ``error:`` line holding ``words``, no traceback."""
    message = result.output.strip()
    assert result.exit_code == 2 and len(message.splitlines()) == 1, message
    for word in words:
        assert word in message, message
    return message


# ------------------------------------------------------------------------------ JSON


def test_json_at_each_limit_reads_and_one_past_is_refused():
    refuse = {"error": ValueError, "expect": None}
    assert parse_json(nested(MAX_DEPTH), "x", **refuse) is not None
    with pytest.raises(ValueError, match=f"x nests arrays and objects more than {MAX_DEPTH} levels deep"):
        parse_json(nested(MAX_DEPTH + 1), "x", **refuse)
    deepest_object = '{"a":' * MAX_DEPTH + "1" + "}" * MAX_DEPTH
    assert parse_json(deepest_object, "x", error=ValueError)["a"]["a"]
    with pytest.raises(ValueError, match="more than 100 levels"):
        parse_json('{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1), "x", error=ValueError)
    largest = '"' + "a" * (MAX_JSON_BYTES - 2) + '"'
    assert len(parse_json(largest.encode(), "x", **refuse)) == MAX_JSON_BYTES - 2
    with pytest.raises(ValueError, match=f"x is {MAX_JSON_BYTES + 1:,} bytes, more than the"):
        parse_json(largest.encode() + b" ", "x", **refuse)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (nested(5000), "more than 100 levels deep"),  # past the parser's own recursion
        (nested(200_000), "more than 100 levels deep"),
        ("1" * 5000, "is not JSON zoo reads (Exceeds the limit (4300 digits)"),
        ("{", "is not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
        ("[1, 2]", "is a JSON array, not an object"),
        ('"text"', "is a JSON string, not an object"),
        ("null", "is a JSON null, not an object"),
        (b'{"a": "\xff"}', "is not UTF-8 text (byte 7: invalid start byte)"),
    ],
)
def test_json_refusals_are_one_line_naming_the_source_and_the_fix(text, words):
    with pytest.raises(DataError) as error:
        parse_json(text, "data.jsonl, line 3", error=DataError, fix="one JSON object a line")
    message = str(error.value)
    assert message.startswith("data.jsonl, line 3 ") and words in message, message
    assert message.endswith("; one JSON object a line") and "\n" not in message


# ------------------------------------------------------------------------------ checkpoints


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("parsers") / "model.safetensors"
    return zoo.save_checkpoint(zoo.create_model("convnet-tiny", framework="torch"), path)


def with_metadata(saved: Path, target: Path, **changes: str) -> Path:
    from safetensors import safe_open

    with safe_open(str(saved), framework="np") as handle:
        metadata = {**handle.metadata(), **changes}
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118
    save_file(tensors, str(target), metadata=metadata)
    return target


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("format_version", "²", "format_version '²' is not a number zoo writes (1 to 9 digits 0-9)"),
        ("format_version", "1" * 5000, "format_version '11111111111111111111111 is not a number zoo writes"),
        ("format_version", "٣", "format_version '٣' is not a number"),
        ("task_info", '{"vocab": ' + nested(5000, '"a"') + "}", "its task_info metadata nests arrays"),
        (
            "recipe",
            '{"data": ' + nested(MAX_DEPTH) + "}",
            "its recipe metadata nests arrays and objects more",
        ),
        ("metrics", "1" * 5000, "its metrics metadata is not JSON zoo reads"),
        ("task_info", "[1,2]", "its task_info metadata is a JSON array, not an object; the file is damaged"),
    ],
)
def test_damaged_checkpoint_metadata_is_refused_in_one_line(saved, tmp_path, key, value, words):
    path = with_metadata(saved, tmp_path / "m.safetensors", **{key: value})
    with pytest.raises(CheckpointError) as error:
        read_checkpoint(path)
    assert words in str(error.value) and "\n" not in str(error.value), str(error.value)
    one_line_refusal(invoke("inspect", path), str(path), key)


def test_checkpoint_metadata_at_the_depth_limit_reads(saved, tmp_path):
    recipe = '{"data": ' + nested(MAX_DEPTH - 1) + "}"  # the object is the first level
    path = with_metadata(saved, tmp_path / "m.safetensors", recipe=recipe)
    assert read_checkpoint(path).json("recipe")["data"][0]


def test_inspect_shows_json_past_the_limits_as_text(saved, tmp_path):
    path = with_metadata(saved, tmp_path / "m.safetensors", notes=nested(5000), extra='{"a": [1]}')
    metadata = zoo.inspect_checkpoint(path)["metadata"]
    assert metadata["notes"] == nested(5000) and metadata["extra"] == {"a": [1]}


# ------------------------------------------------------------------------------ imported folders


def foreign_folder(root: Path, **files: str) -> Path:
    """A transformers-like folder: the prefixed layout's weights, and ``files`` by name."""
    root.mkdir()
    save_file(foreign_tensors(), root / "model.safetensors")
    for name, text in files.items():
        (root / name.replace("_json", ".json")).write_text(text)
    return root


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", "config.json is not JSON (Expecting property name"),
        ("[1, 2]", "config.json is a JSON array, not an object; it should be transformers' config.json"),
        ('{"a": ' + nested(5000) + "}", "config.json nests arrays and objects more than 100 levels deep"),
    ],
)
@pytest.mark.usefixtures("with_format")
def test_a_damaged_config_json_is_named(tmp_path, text, words):
    src = foreign_folder(tmp_path / "src", config_json=text)
    with pytest.raises(InterchangeError, match=r"config\.json") as error:
        import_checkpoint(src, tmp_path / "out")
    assert words in str(error.value)
    one_line_refusal(invoke("import", src, "--out", tmp_path / "cli"), str(src / "config.json"))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", "model.safetensors.index.json is not JSON (Expecting property name"),
        ("[1, 2]", "model.safetensors.index.json is a JSON array, not an object"),
        ("{}", "model.safetensors.index.json: has no weight_map"),
        ('{"weight_map": ["model.safetensors"]}', "has a weight_map that is a JSON array"),
        ('{"weight_map": {"net.a": 3}}', "weight_map maps 'net.a' to a JSON number"),
    ],
)
@pytest.mark.usefixtures("with_format")
def test_a_damaged_safetensors_index_is_named(tmp_path, text, words):
    src = foreign_folder(tmp_path / "src", **{"model.safetensors.index_json": text})
    with pytest.raises(InterchangeError) as error:
        import_checkpoint(src, tmp_path / "out")
    assert words in str(error.value), str(error.value)
    assert str(error.value).endswith('{"weight_map": {"tensor name": "shard file name", ...}}')


@pytest.mark.usefixtures("with_format")
def test_an_index_that_names_its_shards_imports(tmp_path):
    index = {"weight_map": {name: "model.safetensors" for name in foreign_tensors()}}
    src = foreign_folder(tmp_path / "src", **{"model.safetensors.index_json": json.dumps(index)})
    assert import_checkpoint(src, tmp_path / "out").tensors == len(index["weight_map"])


@pytest.mark.parametrize(
    ("text", "words"),
    [("{", "tokenizer_config.json is not JSON"), ('["do_lower_case"]', "is a JSON array, not an object")],
)
@pytest.mark.usefixtures("with_format")
def test_a_damaged_tokenizer_config_is_named(tmp_path, text, words):
    vocab = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"])
    src = foreign_folder(tmp_path / "src", tokenizer_config_json=text, **{"vocab.txt": vocab})
    with pytest.raises(InterchangeError) as error:
        import_checkpoint(src, tmp_path / "out")
    assert words in str(error.value) and "or be removed" in str(error.value), str(error.value)
    assert not (tmp_path / "out").exists()  # refused before anything was written


# ------------------------------------------------------------------------------ runs, data, launchers


def test_a_damaged_recipe_record_stops_a_resume_with_its_name(tmp_path):
    run = RunDir(tmp_path)
    (tmp_path / ".recipe.json").write_text("{")
    with pytest.raises(
        SetupError, match=r"\.recipe\.json is not JSON .*delete it to resume without the check"
    ):
        run.recipe_changes({"name": "x"})
    (tmp_path / ".recipe.json").write_text('{"model": ' + nested(MAX_DEPTH) + "}")
    with pytest.raises(SetupError, match="more than 100 levels deep"):
        run.recipe_changes({"name": "x"})


def test_a_run_listing_survives_deep_and_huge_files(tmp_path):
    (tmp_path / "summary.json").write_text(nested(5000))
    (tmp_path / "recipe.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    info = read_run(tmp_path)
    assert info.status == "damaged"
    assert any("summary.json nests arrays" in p for p in info.problems), info.problems
    assert "recipe.yaml does not read (RefusedYAML)" in info.problems
    assert RunDir(tmp_path).read_summary() == {}


def test_jsonl_rows_nested_past_the_limit_are_named_with_their_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": ' + nested(5000) + "}\n")
    with pytest.raises(DataError, match=r"data.jsonl, line 2 nests arrays and objects more than 100"):
        load_dataset(TextClassificationData(path=path, tokenizer="char"), "tokens")


@pytest.mark.parametrize(
    ("tf_config", "words"),
    [
        ("[1]", "is a JSON array, not an object"),
        ("{", "is not JSON"),
        (nested(3000), "more than 100 levels deep"),
        ('{"task": 3}', "TF_CONFIG's task is a JSON number, not an object"),
        ('{"cluster": {"worker": 2}}', "TF_CONFIG's cluster is not an object of lists of addresses"),
    ],
)
def test_a_tf_config_that_tensorflow_would_not_read_is_named(monkeypatch, tf_config, words):
    monkeypatch.setenv("TF_CONFIG", tf_config)
    recipe = load_recipe({"model": {"architecture": "convnet-tiny"}})
    for check in (is_primary_process, lambda: check_launch(recipe.trainer)):
        with pytest.raises(SetupError, match="TF_CONFIG") as error:
            check()
        assert words in str(error.value) and '"task": {"type": "worker", "index": 0}' in str(error.value)


# ------------------------------------------------------------------------------ YAML recipes


def recipe_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


def recipe_problem(path: Path) -> str:
    with pytest.raises(RecipeError) as error:
        load_recipe(path)
    (problem,) = error.value.problems
    return problem


def laughs(levels: int, width: int = 10) -> str:
    """The billion laughs: each line ``width`` aliases of the line before."""
    lines = ['a0: &a0 "lol"']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("description: &x [*x]\n", "the alias *x (line 2) is inside the value &x names"),
        ("description: &x {a: *x}\n", "the alias *x (line 2) is inside the value &x names"),
        ("init: &x {<<: *x}\n", "the alias *x (line 2) is inside the value &x names"),
        ("? !!set {a: null}\n: 1\n", "a set is used as a key (line 2); keys are field names"),
        ("description: " + nested(5000, "") + "\n", f"nested more than {MAX_DEPTH} levels deep (line 2)"),
        (laughs(10), f"more than {MAX_RECIPE_VALUES:,} values by line 6 (each alias counted"),
    ],
)
def test_yaml_that_would_hang_or_recurse_is_refused_by_line(tmp_path, text, words):
    path = recipe_file(tmp_path, BASE + text)
    assert words in recipe_problem(path)
    message = invoke("validate", path).output
    assert words in message and "Traceback" not in message and len(message.splitlines()) == 2


def test_yaml_at_each_limit_reads_and_one_past_is_refused(tmp_path):
    # Depth: the top mapping is level 1, so MAX_DEPTH - 1 brackets inside it reach the limit.
    assert depth(read_yaml("a: " + nested(MAX_DEPTH - 1) + "\n")) == MAX_DEPTH
    with pytest.raises(RefusedYAML, match="nested more than"):
        read_yaml("a: " + nested(MAX_DEPTH) + "\n")
    # Values: a sequence and its items; an alias counts as the values it stands for.
    assert len(read_yaml("[" + "1, " * (MAX_RECIPE_VALUES - 1) + "]")) == MAX_RECIPE_VALUES - 1
    with pytest.raises(RefusedYAML, match="more than 10,000 values"):
        read_yaml("[" + "1, " * MAX_RECIPE_VALUES + "]")
    half = (MAX_RECIPE_VALUES - 4) // 2  # the outer list, the anchored one twice, a 0: 4 + 2 * half
    listed = f"- &a [{'1, ' * half}]\n- *a\n- 0\n"
    assert [len(x) for x in read_yaml(listed)[:2]] == [half, half]
    with pytest.raises(RefusedYAML, match="more than 10,000 values"):
        read_yaml(listed + "- 0\n")
    # Size: the file's bytes, checked before it is read.
    padding = "#" * (MAX_RECIPE_BYTES - len(BASE) - 1) + "\n"
    assert load_recipe(recipe_file(tmp_path, BASE + padding)).model.preset == "convnet-tiny"
    too_big = recipe_file(tmp_path, BASE + "#" + padding)
    assert (
        recipe_problem(too_big)
        == f"{MAX_RECIPE_BYTES + 1:,} bytes; a recipe is at most {MAX_RECIPE_BYTES:,} bytes"
    )


def test_many_unknown_keys_print_a_bounded_list(tmp_path):
    unknown = MAX_RECIPE_VALUES // 2 - 10  # two values a key, under the document's limit
    path = recipe_file(tmp_path, BASE + "".join(f"k{i}: 1\n" for i in range(unknown)))
    result = invoke("validate", path, "--quiet")
    lines = result.output.splitlines()
    assert result.exit_code == 2 and len(lines) == 1 + MAX_SHOWN_PROBLEMS + 1, lines[:3]
    assert lines[0] == f"error: {path}: {unknown:,} problem(s)"
    allowed = "name, description, model, data, optimizer, schedule, trainer, init, export, tracking"
    assert lines[1] == f"  k0: unknown key; allowed: {allowed}"
    assert lines[-1] == f"  ... and {unknown - MAX_SHOWN_PROBLEMS:,} more"
    many = recipe_file(tmp_path, BASE + "".join(f"k{i}: 1\n" for i in range(200_001)))
    assert "a recipe is at most" in recipe_problem(many)  # 200,001 keys are refused before parsing
    fewer = recipe_file(tmp_path, BASE + "".join(f"k{i}: 1\n" for i in range(MAX_RECIPE_VALUES)))
    assert recipe_problem(fewer).startswith("more than 10,000 values by line")


def test_resume_refuses_a_billion_laughs_recipe_before_its_states(tmp_path):
    run = tmp_path / "run"
    (run / "state").mkdir(parents=True)
    (run / "state" / "step-000000014.ckpt").write_bytes(b"")
    (run / "recipe.yaml").write_text(BASE + laughs(10))
    result = invoke("resume", run)
    assert result.exit_code == 2 and "more than 10,000 values" in result.output, result.output


# ------------------------------------------------------------------------------ CLI numbers


@pytest.mark.parametrize(
    ("args", "option", "allowed"),
    [
        (["--length", "1000000000000"], "--length", f"1<=x<={MAX_SAMPLE_LENGTH}"),
        (["--length", "1000000000"], "--length", f"1<=x<={MAX_SAMPLE_LENGTH}"),
        (["--length", str(MAX_SAMPLE_LENGTH + 1)], "--length", f"1<=x<={MAX_SAMPLE_LENGTH}"),
        (["--temperature", "nan"], "--temperature", "'nan' is not a finite number"),
        (["--temperature", "inf"], "--temperature", "'inf' is not a finite number"),
        (["--temperature", "-1"], "--temperature", "x>=0"),
        (["--top-p", "nan"], "--top-p", "'nan' is not a finite number"),
        (["--seed", "-1"], "--seed", f"0<=x<={2**32 - 1}"),
        (["--seed", str(2**32)], "--seed", f"0<=x<={2**32 - 1}"),
    ],
)
def test_sample_numbers_past_their_range_are_refused_at_once(tmp_path, args, option, allowed):
    # The checkpoint does not exist: the option is refused before anything is read.
    result = invoke("sample", tmp_path / "none.safetensors", *args)
    assert result.exit_code == 2 and f"'{option}'" in result.output and allowed in result.output, (
        result.output
    )
    assert "Traceback" not in result.output


def test_sampling_settings_at_their_edges():
    check_length(MAX_SAMPLE_LENGTH)
    with pytest.raises(PromptError, match=r"length must lie in 1 \.\. 100,000 tokens, got 1,000,000,000"):
        check_length(10**9)
    assert Sampling(seed=2**32 - 1).seed == 2**32 - 1
    for bad in ({"seed": -1}, {"seed": 2**32}, {"temperature": float("nan")}, {"temperature": float("inf")}):
        with pytest.raises(
            PromptError, match=r"seed must lie in 0 \.\. 4294967295|temperature must be >= 0 and finite"
        ):
            Sampling(**bad)
    logits = np.array([[0.5, 3.0, -1.0, 2.9]])
    for temperature in (1e-320, 5e-324):  # subnormal: logits / t overflow to inf
        chosen = Sampling(temperature=temperature, seed=1).choose(logits, np.random.default_rng(1))
        assert chosen.tolist() == [1]


def test_a_vocabulary_size_past_the_limit_is_refused_before_the_trainer(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("hello world hello there\n")
    result = invoke("tokenizer", "train", text, "-o", tmp_path / "t.json", "--vocab-size", "99999999999999")
    assert (
        result.exit_code == 2
        and "'--vocab-size'" in result.output
        and f"2<=x<={MAX_VOCAB_SIZE}" in result.output
    )
    done = invoke("tokenizer", "train", text, "-o", tmp_path / "t.json", "--vocab-size", MAX_VOCAB_SIZE)
    assert done.exit_code == 0 and (tmp_path / "t.json").is_file(), done.output


@pytest.mark.parametrize("value", ["abc", "-1", "0", "inf", "nan", "", str(DDP_TIMEOUT_MAX_S + 1)])
def test_a_ddp_timeout_that_is_not_seconds_is_named(monkeypatch, value):
    monkeypatch.setenv("ZOO_DDP_TIMEOUT_S", value)
    with pytest.raises(SetupError, match=f"ZOO_DDP_TIMEOUT_S={value!r} is not a number of seconds"):
        ddp_timeout_s()
    ddp = load_recipe(
        {"model": {"architecture": "convnet-tiny"}, "trainer": {"strategy": "ddp", "devices": 2}}
    )
    with pytest.raises(SetupError, match="ZOO_DDP_TIMEOUT_S"):
        check_trainer(ddp.trainer)
    check_trainer(load_recipe({"model": {"architecture": "convnet-tiny"}}).trainer)  # not used: not read


def test_a_ddp_timeout_at_its_limits_is_used(monkeypatch):
    for value, seconds in (("600", 600.0), ("0.5", 0.5), (str(DDP_TIMEOUT_MAX_S), DDP_TIMEOUT_MAX_S)):
        monkeypatch.setenv("ZOO_DDP_TIMEOUT_S", value)
        assert ddp_timeout_s() == seconds
    monkeypatch.delenv("ZOO_DDP_TIMEOUT_S")
    assert ddp_timeout_s() == 600.0


def test_a_bad_ddp_timeout_is_refused_before_the_run_not_at_import(tmp_path):
    """A fresh process, as a user's: the variable was read when zoo.lightning.trainer was
    imported, so a bad value ended every Lightning command in a ValueError traceback."""
    import os
    import subprocess
    import sys

    args = [
        "train", LM_RECIPE, "--set", "trainer.strategy=ddp", "--set", "trainer.devices=2",
        "--set", f"export.dir={tmp_path}",
    ]  # fmt: skip
    env = {**os.environ, "ZOO_DDP_TIMEOUT_S": "abc"}
    command = [sys.executable, "-m", "zoo.cli", *map(str, args)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"error: ZOO_DDP_TIMEOUT_S='abc' is not a number of seconds in (0, {DDP_TIMEOUT_MAX_S}]; set it to "
        "one (e.g. 600) or unset it for 600"
    ], done.stderr
    assert list(tmp_path.iterdir()) == []  # refused before a run folder


# ------------------------------------------------------------------------------ empty text


@pytest.mark.parametrize("content", ["", " \n\n\t "])
def test_tokenizer_train_refuses_a_file_without_text(tmp_path, content):
    text = tmp_path / "empty.txt"
    text.write_text(content)
    result = invoke("tokenizer", "train", text, "-o", tmp_path / "t.json")
    one_line_refusal(result, str(text), "no text to learn from")
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("content", ["", "\n \n"])
def test_train_on_a_file_without_text_names_it(tmp_path, content):
    text = tmp_path / "empty.txt"
    text.write_text(content)
    result = invoke(
        "train", LM_RECIPE, "--set", f"data.path={text}", "--set", f"export.dir={tmp_path / 'runs'}"
    )
    one_line_refusal(result, f"data.path '{text}': no text (empty, or only whitespace)")
    assert not (tmp_path / "runs").exists()


def test_text_too_short_for_a_test_split_is_named(tmp_path):
    text = tmp_path / "short.txt"
    text.write_text("abcdefgh " * 10)
    cfg = TextData(path=text, seq_len=8, val_fraction=0, test_fraction=0.01)
    with pytest.raises(
        DataError, match=r"short.txt': 90 tokens leave none for testing at data.test_fraction 0.01"
    ):
        load_dataset(cfg, "tokens")
