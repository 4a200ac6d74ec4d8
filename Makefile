# Every target is idempotent. `make demo` and `make test` do all the set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TR := $(VENV)/bin/triton-release

.PHONY: install lock stack stack-down demo lint test test-stack test-fast bench clean docs docs-gen

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# requirements.lock, the action image's pinned and hashed dependencies, from pyproject.toml's
# [project].dependencies (stack/lock.py). uv is installed into the venv for this alone.
lock: install
	$(PY) -m pip install --quiet 'uv>=0.5'
	$(PY) stack/lock.py

stack: install
	$(PY) stack/stack.py up

stack-down:
	@if [ -x $(PY) ]; then $(PY) stack/stack.py down; fi

DEMO_DIR ?= .stack/demo
DEMO_REPO := 127.0.0.1:5000/triton-release-demo/models
DEMO_BASE := local/tritonserver:24.10-py3

# A full release of the example model_repository/ into the local registry, from a scratch git
# repository in $(DEMO_DIR) (made once), so the demo never writes into this checkout.
demo: stack
	@if [ ! -d $(DEMO_DIR)/.git ]; then \
	  mkdir -p $(DEMO_DIR) && cp -r model_repository $(DEMO_DIR)/ && \
	  git -C $(DEMO_DIR) init -q -b main && git -C $(DEMO_DIR) add -A && \
	  git -C $(DEMO_DIR) -c user.name=demo -c user.email=demo@example.com commit -q -m "the example models"; fi
	cd $(DEMO_DIR) && $(abspath $(TR)) release --to $(DEMO_REPO) --base-image $(DEMO_BASE) --commit

# The docs site (mkdocs.yml, docs/): `make docs` serves it at http://127.0.0.1:$(DOCS_PORT), on this
# machine only, rebuilt as the pages change; `make test` builds it with --strict, so a broken link
# or anchor fails. docs/reference/ is generated from the code: `make docs-gen`, then commit it.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs
DOCS_PORT ?= 8000

docs: install
	$(MKDOCS) serve --dev-addr 127.0.0.1:$(DOCS_PORT)

docs-gen: install
	$(PY) docs/gen.py

# ruff (pyflakes, bugbear, pyupgrade, import order; and its formatter's check) and mypy, as configured
# in pyproject.toml. `$(VENV)/bin/ruff format src tests stack bench docs` fixes what the check finds.
lint: install
	$(VENV)/bin/ruff check --quiet src tests stack bench docs
	$(VENV)/bin/ruff format --check --quiet src tests stack bench docs
	$(VENV)/bin/mypy

# Two halves at once on the machine's two cores: the tests on the stack (integration, faults,
# end-to-end), and beside them lint, the docs build and the unit tests, which need no Docker and
# print their output whole when they end. Either failing fails make test.
test: install
	@$(MAKE) --no-print-directory -j2 test-stack test-fast

# The stack's tests run on two workers, a test module to each at a time (their module-scoped
# releases and servers stay in one process), the longest modules first (tests/conftest.py), then
# the few marked `serial` (they measure latency or time a race through the daemon), alone.
STACK_TESTS := TRITON_RELEASE_TEST_SWEEP=1 $(PY) -m pytest -p no:cacheprovider --ignore=tests/unit
test-stack: stack
	$(STACK_TESTS) -m "not serial" -n 2 --dist loadfile --no-loadscope-reorder
	$(STACK_TESTS) -m serial

FAST_LOG := .stack/lint-docs-unit.log
test-fast: install
	@mkdir -p .stack; code=0; \
	{ $(MAKE) --no-print-directory lint && \
	  $(MKDOCS) build --strict && \
	  $(PY) -m pytest -p no:cacheprovider tests/unit; } > $(FAST_LOG) 2>&1 || code=$$?; \
	echo "== lint, docs build (--strict, not --quiet: that hides its warnings) and unit tests: exit $$code =="; \
	cat $(FAST_LOG); exit $$code

# The figures of a clean tree only (bench/revision.py: a dirty one is refused; --allow-dirty marks it);
# bench.cold, the first release on a cold daemon (a second dockerd of its own, so root); bench.weights,
# new weights of 512 MiB and of 4 GiB and 1 MiB against the naive pipeline and the physical floor; bench.report
# draws bench/results.png again once the latency figures are in bench/results.json, and records the
# run's minutes. The registry keeps every blob pushed to it (tens of GB a run): its garbage is
# collected before and after (stack/stack.py collect).
bench: stack
	@echo $$(date +%s) > .stack/bench-started
	$(PY) stack/stack.py collect
	$(PY) -m bench
	$(PY) -m bench.latency
	$(PY) -m bench.cold
	$(PY) -m bench.weights --large
	$(PY) -m bench.report --started $$(cat .stack/bench-started)
	$(PY) stack/stack.py collect

clean: stack-down
	rm -rf $(VENV) .stack
