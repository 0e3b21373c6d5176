# The two commands a newcomer needs (see README.md):
#   make train   set everything up, then train the default recipe on the embedded digits
#   make test    set everything up, then run the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: train test test-heavy bench lint setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/zoo train recipes/cnn-digits.yaml

# Two test processes (pytest-xdist), each test file in one of them: 1.7x faster on two cores.
TEST_WORKERS ?= 2

test: $(STAMP)
	$(BIN)/ruff check zoo architectures tests bench
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25 -m "not heavy"

# The registry-wide tests of the entries over 10M parameters, one process (~16 GB at its peak).
test-heavy: $(STAMP)
	$(BIN)/python -m pytest -q -m heavy

# Every speed table of bench/RESULTS.md at one commit (bench/all.py): ~90 min on 2 quiet cores
# at 2 rounds, 53 min with BENCH_ROUNDS=1. Run it with nothing else on the machine.
BENCH_ROUNDS ?= 2

bench: $(STAMP)
	$(BIN)/python bench/all.py --rounds $(BENCH_ROUNDS)

lint: $(STAMP)
	$(BIN)/ruff check zoo architectures tests bench
	$(BIN)/ruff format --check zoo architectures tests bench

clean:
	rm -rf $(VENV) build *.egg-info
