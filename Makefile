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

DEMO_IMAGE := triton-release-demo/models:candidate
DEMO_BASE := local/tritonserver:24.10-py3

demo: stack
	$(TR) validate --model-repository model_repository
	$(TR) changed --model-repository model_repository
	$(TR) build --model-repository model_repository --base-image $(DEMO_BASE) --tag $(DEMO_IMAGE)
	$(TR) test --model-repository model_repository --image $(DEMO_IMAGE)

test: stack
	$(PY) -m pytest

bench: stack
	$(PY) -m bench

clean: stack-down
	rm -rf $(VENV) .stack
