"""bench/all.py (``make bench``): every benchmark it names exists and writes its section, and
one that fails is named in the header while the others still run and keep their sections."""

from __future__ import annotations

import sys

import pytest
from bench_scripts import BENCH, load_bench_script


@pytest.fixture
def bench_all():
    return load_bench_script("all")


def test_every_benchmark_exists_and_writes_its_own_section(bench_all):
    for name, script, _, _ in bench_all.BENCHMARKS:
        source = (BENCH / script).read_text()
        writes = "write_section" in source or "publish(" in source  # results_section's two ways
        assert "--write-results" in source and writes, name


def test_a_failed_benchmark_is_named_and_the_others_still_run(bench_all, tmp_path, monkeypatch):
    results = tmp_path / "RESULTS.md"
    results.write_text(f"# Results\n\n{bench_all.HEADING}\n\nold header\n\n## Other\n\nkept\n")
    seen = tmp_path / "seen"
    good = tmp_path / "good.py"
    good.write_text(f"import pathlib, sys\npathlib.Path({str(seen)!r}).write_text(' '.join(sys.argv[1:]))\n")
    bad = tmp_path / "bad.py"
    bad.write_text("raise SystemExit(3)\n")
    benchmarks = [("bad", str(bad), [], False), ("good", str(good), ["--steps", "5"], True)]
    monkeypatch.setattr(bench_all, "BENCHMARKS", benchmarks)
    monkeypatch.setattr(sys, "argv", ["all.py", "--rounds", "3", "--results", str(results)])

    assert bench_all.main() == 1

    assert seen.read_text() == "--steps 5 --write-results --rounds 3"
    text = results.read_text()
    assert "old header" not in text and "## Other\n\nkept\n" in text
    assert "| `bad` |" in text and "**failed (3)**" in text
    assert "| `good` |" in text and "| ok |" in text
    assert "Failed, their sections left as they were: bad." in text
    assert "`bench/all.py --rounds 3`" in text


def test_an_unknown_benchmark_is_refused_with_the_names_that_exist(bench_all, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["all.py", "--only", "speed,sped"])
    with pytest.raises(SystemExit) as exited:
        bench_all.main()
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "unknown benchmarks ['sped']" in error and "real_sizes" in error
