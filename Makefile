# Two commands do all the set-up: `make demo` and `make test` (see README.md).
# Both use one virtual environment, .venv; each installs only what it needs into it, once
# (a marker file per set, redone when pyproject.toml changes).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The pip a venv comes with is new enough; its notice of a newer one is noise here.
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: demo test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The demo needs the package alone.
$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(PIP) -e .
	touch $@

# The tests need their own extra, the documentation site's (they build it) and the web
# view's. That set holds the package too, so the demo's marker is made with it.
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[test,docs,ui]'
	touch $@ $(VENV)/.installed-demo

demo: $(VENV)/.installed-demo
	$(BIN)/snapvc demo

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest

bench: $(VENV)/.installed-test
	$(PIP) -e '.[test,bench]'
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
