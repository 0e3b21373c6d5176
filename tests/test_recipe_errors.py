"""Recipes zoo must refuse, in one line each, whatever they hold: numbers are what they say (strict
types, finite, in range); YAML that would hang or recurse (aliases inside their own anchor, the
billion laughs, sets as keys, deep nesting) is refused by line, each limit of zoo.limits read at
the limit and refused one past it; and no YAML document, however odd (Hypothesis), ends in anything
but a Recipe or a RecipeError."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_helpers import invoke, nested
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zoo.limits import MAX_DEPTH, MAX_RECIPE_BYTES, MAX_RECIPE_VALUES, MAX_SHOWN_PROBLEMS, depth
from zoo.recipe import Recipe, RecipeError, load_recipe
from zoo.recipe.overrides import RefusedYAML, read_yaml

BASE = {"model": {"architecture": "convnet-tiny"}}


def problems(**sections) -> str:
    with pytest.raises(RecipeError) as error:
        load_recipe({**BASE, **sections})
    assert len(error.value.problems) == 1, error.value.problems
    return error.value.problems[0]


@pytest.mark.parametrize(
    ("sections", "field", "words"),
    [
        ({"data": {"batch_size": True}}, "data.batch_size", "not true/false"),
        ({"data": {"batch_size": "8"}}, "data.batch_size", "not quoted text"),
        ({"trainer": {"max_epochs": 2.0}}, "trainer.max_epochs", "needs a whole number"),
        ({"trainer": {"progress_bar": 1}}, "trainer.progress_bar", "needs true or false"),
        ({"optimizer": {"betas": [0.9, False]}}, "optimizer.betas.1", "not true/false"),
        ({"trainer": {"seed": -1}}, "trainer.seed", "greater than or equal to 0"),
        ({"trainer": {"seed": 2**32}}, "trainer.seed", "less than 4294967296"),
        ({"trainer": {"seed": 2**70}}, "trainer.seed", "less than 4294967296"),
        ({"optimizer": {"lr": float("inf")}}, "optimizer.lr", "not a finite number"),
        ({"optimizer": {"lr": float("nan")}}, "optimizer.lr", "not a finite number"),
        ({"optimizer": {"name": "sgd", "momentum": float("nan")}}, "optimizer.momentum", "finite"),
        ({"schedule": {"name": "step", "gamma": float("-inf")}}, "schedule.gamma", "finite"),
        ({"model": {"architecture": "convnet-tiny", "dropout": float("nan")}}, "model.dropout", "finite"),
        ({"trainer": {"max_epochs": 10**9}}, "trainer.max_epochs", "less than or equal to 10000"),
        ({"trainer": {"max_epochs": 0}}, "trainer.max_epochs", "greater than 0"),
    ],
)
def test_numbers_are_strict_finite_and_bounded(sections, field, words):
    message = problems(**sections)
    assert message.startswith(f"{field}:") and words in message, message


def test_the_bounds_that_stay_allowed():
    trainer = {"seed": 2**32 - 1, "max_epochs": 10_000}
    recipe = load_recipe({**BASE, "trainer": trainer, "optimizer": {"lr": 1}})
    assert recipe.trainer.seed == 2**32 - 1 and recipe.optimizer.lr == 1.0
    assert isinstance(recipe.optimizer.lr, float)
    again = load_recipe({**recipe.to_dict(), "optimizer": {"name": "adam", "betas": [0.8, 0.9], "lr": 1e-3}})
    assert again.optimizer.betas == (0.8, 0.9)  # a list is how YAML writes a tuple


def test_exponents_without_a_dot_are_numbers(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: {architecture: convnet-tiny}\noptimizer: {lr: 1e-3}\n")
    assert load_recipe(recipe, ["optimizer.eps=1e-7"]).optimizer.eps == 1e-7  # PyYAML alone reads text


def test_python_built_recipes_refuse_non_finite_rates_too():
    from pydantic import ValidationError

    from zoo.recipe import Adam

    with pytest.raises(ValidationError, match="finite number"):
        Adam(lr=float("inf"))


def test_max_len_shorter_than_the_text_window_is_caught_at_validate(tmp_path):
    recipe = tmp_path / "lm.yaml"
    recipe.write_text("model: {architecture: transformer, max_len: 16}\ndata: {name: text, seq_len: 32}\n")
    with pytest.raises(RecipeError) as error:
        load_recipe(recipe)
    (message,) = error.value.problems
    assert message.startswith("model.max_len: 16 is shorter than data.seq_len 32"), message
    assert "raise model.max_len to at least 32 or lower data.seq_len to 16" in message
    load_recipe(recipe, ["model.max_len=32"])  # the fix it names works


def test_yaml_values_no_field_takes_are_named(tmp_path):
    recipe = tmp_path / "dated.yaml"
    recipe.write_text("description: 2024-01-02\nmodel: {architecture: convnet-tiny}\n3: x\n")
    with pytest.raises(RecipeError) as error:
        load_recipe(recipe)
    text = "\n".join(error.value.problems)
    assert "description: a YAML date" in text and "quote it" in text, text
    assert "the key 3 is not text" in text, text
    recipe.write_text("model: {architecture: convnet-tiny}\n{1: 2}: x\n")
    with pytest.raises(RecipeError, match=r"a dict is used as a key \(line 2\)"):
        load_recipe(recipe)


# ----------------------------------------------------------------- YAML that would hang or recurse


BASE_YAML = "model: {architecture: convnet-tiny}\n"


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
    path = recipe_file(tmp_path, BASE_YAML + text)
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
    padding = "#" * (MAX_RECIPE_BYTES - len(BASE_YAML) - 1) + "\n"
    assert load_recipe(recipe_file(tmp_path, BASE_YAML + padding)).model.preset == "convnet-tiny"
    too_big = recipe_file(tmp_path, BASE_YAML + "#" + padding)
    assert (
        recipe_problem(too_big)
        == f"{MAX_RECIPE_BYTES + 1:,} bytes; a recipe is at most {MAX_RECIPE_BYTES:,} bytes"
    )


def test_many_unknown_keys_print_a_bounded_list(tmp_path):
    unknown = MAX_RECIPE_VALUES // 2 - 10  # two values a key, under the document's limit
    path = recipe_file(tmp_path, BASE_YAML + "".join(f"k{i}: 1\n" for i in range(unknown)))
    result = invoke("validate", path, "--quiet")
    lines = result.output.splitlines()
    assert result.exit_code == 2 and len(lines) == 1 + MAX_SHOWN_PROBLEMS + 1, lines[:3]
    assert lines[0] == f"error: {path}: {unknown:,} problem(s)"
    allowed = "name, description, model, data, optimizer, schedule, trainer, init, export, tracking"
    assert lines[1] == f"  k0: unknown key; allowed: {allowed}"
    assert lines[-1] == f"  ... and {unknown - MAX_SHOWN_PROBLEMS:,} more"
    many = recipe_file(tmp_path, BASE_YAML + "".join(f"k{i}: 1\n" for i in range(200_001)))
    assert "a recipe is at most" in recipe_problem(many)  # 200,001 keys are refused before parsing
    fewer = recipe_file(tmp_path, BASE_YAML + "".join(f"k{i}: 1\n" for i in range(MAX_RECIPE_VALUES)))
    assert recipe_problem(fewer).startswith("more than 10,000 values by line")


def test_resume_refuses_a_billion_laughs_recipe_before_its_states(tmp_path):
    run = tmp_path / "run"
    (run / "state").mkdir(parents=True)
    (run / "state" / "step-000000014.ckpt").write_bytes(b"")
    (run / "recipe.yaml").write_text(BASE_YAML + laughs(10))
    result = invoke("resume", run)
    assert result.exit_code == 2 and "more than 10,000 values" in result.output, result.output


# -------------------------------------------------------------------------------------------- fuzz


SECTIONS = ["model", "data", "optimizer", "schedule", "trainer", "init", "export", "name", "x"]
FIELDS = [
    "architecture", "name", "lr", "batch_size", "seed", "max_epochs", "precision", "devices",
    "path", "from", "dir", "run_name", "betas", "max_len", "seq_len", "dropout", "momentum",
]  # fmt: skip
SCALARS = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
    | st.sampled_from(["convnet-tiny", "mlp", "sgd", "adam", "text", "npz", "keras", "16-mixed", "cpu"])
)  # fmt: skip
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), inner, max_size=4),
    max_leaves=10,
)  # fmt: skip
DOCUMENTS = st.dictionaries(st.sampled_from(SECTIONS), VALUES, max_size=6)


def loads_or_refuses(source, overrides=()) -> None:
    try:
        recipe = load_recipe(source, overrides)
    except RecipeError as error:
        assert error.problems and all(isinstance(p, str) and p for p in error.problems)
        return
    assert isinstance(recipe, Recipe)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=DOCUMENTS)
def test_fuzz_recipe_documents_never_escape_as_tracebacks(tmp_path_factory, document):
    path = tmp_path_factory.mktemp("fuzz") / "recipe.yaml"
    path.write_text(yaml.safe_dump(document, allow_unicode=True))
    loads_or_refuses(path)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=80) | st.binary(max_size=60).map(lambda b: b.decode("latin-1")))
def test_fuzz_raw_yaml_text_never_escapes(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "recipe.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    loads_or_refuses(path)


@settings(max_examples=100, deadline=None)
@given(
    overrides=st.lists(
        st.tuples(
            st.lists(st.sampled_from(SECTIONS + FIELDS + ["0", "3"]), min_size=1, max_size=3).map(".".join),
            st.text(max_size=10) | SCALARS.map(lambda v: yaml.safe_dump(v).removesuffix("\n...\n").strip()),
        ).map("=".join),
        max_size=3,
    )
)
def test_fuzz_overrides_never_escape(overrides):
    loads_or_refuses({**BASE, "data": {"name": "digits"}}, overrides)
