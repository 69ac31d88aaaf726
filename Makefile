# The two front-door commands (see README): `make demo` and `make test`.
# Both create the virtual environment on first use; torch is installed first from the
# pinned CPU wheel so that no dependency can pull a CUDA build.
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint
setup: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: setup
	$(BIN)/gkr render
	$(BIN)/gkr validate

lint: setup
	$(BIN)/ruff check .

test: lint
	$(BIN)/pytest
