# Every target is idempotent. `make demo` and `make test` do all the set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TR := $(VENV)/bin/triton-release

.PHONY: install stack stack-down demo test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

stack: install
	$(PY) stack/stack.py up

stack-down:
	@if [ -x $(PY) ]; then $(PY) stack/stack.py down; fi

demo: stack
	$(TR) validate --model-repository model_repository

test: stack
	$(PY) -m pytest

bench: stack
	$(PY) -m bench

clean: stack-down
	rm -rf $(VENV) .stack
