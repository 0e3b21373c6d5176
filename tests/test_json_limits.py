"""JSON zoo did not write (data rows, run files) is read within the limits of :mod:`zoo.limits`
(size, depth), each tested at the limit and one past it (issue 27). Every refusal is zoo's own
error in one line naming the source and the fix, never a RecursionError or JSONDecodeError
traceback. Checkpoint metadata, foreign config files, recipes and TF_CONFIG have theirs with
their feature (test_checkpoint_errors, test_interchange_errors, test_recipe_errors,
test_launchers)."""

from __future__ import annotations

import pytest
from cli_helpers import nested

from zoo.data import DataError, load_dataset
from zoo.limits import MAX_DEPTH, MAX_JSON_BYTES, parse_json
from zoo.recipe import TextClassificationData
from zoo.runs import RunDir
from zoo.runs.listing import read_run


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
