# UOL Studio: `make run` opens the IDE, `make test` runs every suite.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: install run test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# The CPU build of torch first: a bare `torch` would pull a multi-GB CUDA build.
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev]"
	touch $(STAMP)

run: install
	@if $(VENV)/bin/uol serve --help >/dev/null 2>&1; then $(VENV)/bin/uol serve; \
	else echo "The IDE is not part of this build yet; the command line:"; $(VENV)/bin/uol --help; fi

lint: install
	$(VENV)/bin/ruff check .

test: install lint
# The whole suite, never -x: one failure must not hide the others. --durations names the
# slowest tests so they stay in check.
	@status=0; \
	$(VENV)/bin/python -m pytest tests -q -p no:cacheprovider --durations=15 || status=1; \
	if ls ui_tests/test_*.py >/dev/null 2>&1; then \
		$(VENV)/bin/python -m pytest ui_tests -q -p no:cacheprovider --durations=5 || status=1; fi; \
	exit $$status

CPU_BENCHES := cpu_gemm cpu_ops graph_bench hcf_bench ide_latency

bench: install
	@for b in $(CPU_BENCHES); do echo "== benchmarks/$$b.py"; $(PY) benchmarks/$$b.py || exit 1; done
	@if $(PY) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then \
		bash benchmarks/gpu_check.sh; else echo "== no GPU: benchmarks/gpu_check.sh skipped"; fi
	@echo "load test (a server, 20 users): $(PY) benchmarks/load_test.py"

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
