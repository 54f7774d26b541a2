# UOL Studio: `make run` opens the IDE, `make test` runs every suite.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: install run test test-arm lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# The CPU build of torch first: a bare `torch` would pull a multi-GB CUDA build.
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev,models,bench]"
	@# System tools some features need: chromium (the IDE's browser tests), valgrind (callgrind
	@# hotspots), the aarch64 cross compiler and qemu-user (ARM kernels verified under
	@# emulation), redis-server (remote workers' broker). Installed where apt is available to
	@# root (or through sudo); elsewhere the tests that need them skip and name the package.
	@missing=""; for t in chromium valgrind aarch64-linux-gnu-gcc qemu-aarch64 redis-server; do \
		command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
		sudo=""; [ "$$(id -u)" = "0" ] || { sudo -n true 2>/dev/null && sudo="sudo -n"; } || true; \
		if command -v apt-get >/dev/null 2>&1 && { [ "$$(id -u)" = "0" ] || [ -n "$$sudo" ]; }; then \
			$$sudo apt-get update -qq && $$sudo apt-get install -y -qq chromium valgrind \
				gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user redis-server >/dev/null; \
		else echo "note: missing$$missing (apt: chromium valgrind gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user redis-server)"; fi; \
	fi
	touch $(STAMP)

run: install
	@if $(VENV)/bin/uol serve --help >/dev/null 2>&1; then $(VENV)/bin/uol serve; \
	else echo "The IDE is not part of this build yet; the command line:"; $(VENV)/bin/uol --help; fi

# ruff (style, bugs, complexity <= 15), the layer contracts of .importlinter, and no import
# circle between files of different families (tools/import_cycles.py), no import inside a function
# without its reason (tools/deferred_imports.py)
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/python tools/import_cycles.py
	$(VENV)/bin/python tools/deferred_imports.py

test: install lint
# The whole suite, never -x: one failure must not hide the others. --durations names the
# slowest tests so they stay in check. The browser suite runs beside the unit suite, not after
# it: it waits on a browser and a server most of its time, and the two in turn took 83 minutes
# of CI on a 2-core host. Its report follows the unit suite's.
	@status=0; log=$$(mktemp); ui=0; \
	if ls ui_tests/test_*.py >/dev/null 2>&1; then ui=1; \
		( $(VENV)/bin/python -m pytest ui_tests -p no:cacheprovider --durations=5 >$$log 2>&1; \
		  echo $$? >$$log.rc ) & fi; \
	$(VENV)/bin/python -m pytest tests -p no:cacheprovider --durations=15 || status=1; \
	wait; \
	if [ $$ui = 1 ]; then echo "== ui_tests"; cat $$log; [ "$$(cat $$log.rc)" = 0 ] || status=1; fi; \
	rm -f $$log $$log.rc; exit $$status

# ARM kernels cross-built and verified under qemu-aarch64 for the whole library, and every case of
# the optimisation guide (make test runs a sample of both).
test-arm: install
	UOL_LONG=1 $(VENV)/bin/python -m pytest tests/test_arm_emulation.py tests/test_arm_sve.py tests/test_guide.py -p no:cacheprovider

CPU_BENCHES := cpu_gemm cpu_ops graph_bench hcf_bench ide_latency

bench: install
	@for b in $(CPU_BENCHES); do echo "== benchmarks/$$b.py"; $(PY) benchmarks/$$b.py || exit 1; done
	@if $(PY) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then \
		bash benchmarks/gpu_check.sh; else echo "== no GPU: benchmarks/gpu_check.sh skipped"; fi
	@echo "load test (a server, 20 users): $(PY) benchmarks/load_test.py"

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
