# Two commands do all the set-up: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,docs]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/snapvc demo

test: $(BIN)/.installed
	$(BIN)/python -m pytest

bench: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
