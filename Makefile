# kvlab — `make run` sets up and starts everything; `make test` sets up and runs the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO := data/demo/bench_results.jsonl

.PHONY: run test test-postgres test-oracle test-oracle-nr test-oracle-avx2 test-gpu setup bench crosscheck lint format user check-python

run: setup
	scripts/run.sh

test: setup $(VENV)/.dev-installed
	scripts/ensure-redis.sh
	scripts/ensure-chromium.sh
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/mypy
	KVLAB_LLAMA_BENCH="$$(scripts/build-llama-server.sh --bench)" KVLAB_LLAMA_SERVER="$$(scripts/build-llama-server.sh)" KVLAB_LLAMA_FIT_PARAMS="$$(scripts/build-llama-server.sh --fit-params)" $(BIN)/pytest

# The same suite on PostgreSQL (Debian's postgresql, started and given a kvlab role).
test-postgres: setup $(VENV)/.dev-installed
	scripts/ensure-redis.sh
	scripts/ensure-chromium.sh
	DATABASE_URL="$$(scripts/ensure-postgres.sh)" KVLAB_LLAMA_BENCH="$$(scripts/build-llama-server.sh --bench)" KVLAB_LLAMA_SERVER="$$(scripts/build-llama-server.sh)" KVLAB_LLAMA_FIT_PARAMS="$$(scripts/build-llama-server.sh --fit-params)" $(BIN)/pytest

# The oracle tests alone: kvlab's predictions against a real llama-server's log and llama-fit-params.
test-oracle: setup $(VENV)/.dev-installed
	KVLAB_LLAMA_BENCH="$$(scripts/build-llama-server.sh --bench)" KVLAB_LLAMA_SERVER="$$(scripts/build-llama-server.sh)" KVLAB_LLAMA_FIT_PARAMS="$$(scripts/build-llama-server.sh --fit-params)" $(BIN)/pytest -m llama_server

# The oracle tests with -nr forced into every llama-server and llama-fit-params they start (the CPU's
# AMX / CPU_REPACK buffer types off everywhere; kvlab predicts the same).
test-oracle-nr: setup $(VENV)/.dev-installed
	KVLAB_ORACLE_NO_REPACK=1 KVLAB_LLAMA_BENCH="$$(scripts/build-llama-server.sh --bench)" KVLAB_LLAMA_SERVER="$$(scripts/build-llama-server.sh)" KVLAB_LLAMA_FIT_PARAMS="$$(scripts/build-llama-server.sh --fit-params)" $(BIN)/pytest -m llama_server sizing/tests

# The same oracle tests on another CPU: llama.cpp built as for a CPU with AVX2 and no AVX-512 or AMX
# (another ~9 minutes the first time), so CPU_REPACK, not AMX, takes the weights (x86 only).
test-oracle-avx2: setup $(VENV)/.dev-installed
	KVLAB_LLAMA_SERVER="$$(scripts/build-llama-server.sh --avx2)" KVLAB_LLAMA_FIT_PARAMS="$$(scripts/build-llama-server.sh --avx2 --fit-params)" $(BIN)/pytest -m llama_server sizing/tests

# The GPU checks: kvlab's --fit and per-device memory against a CUDA build of llama.cpp
# (built once, for this GPU) on this machine's NVIDIA GPU. Without a GPU it says so and passes.
test-gpu: setup $(VENV)/.dev-installed
	@if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then \
		echo "kvlab: no NVIDIA GPU on this machine: the GPU checks are skipped"; exit 0; fi; \
	KVLAB_LLAMA_FIT_PARAMS_CUDA="$$(scripts/build-llama-server.sh --cuda --fit-params)" \
	KVLAB_LLAMA_SERVER_CUDA="$$(scripts/build-llama-server.sh --cuda)" \
	$(BIN)/pytest -m gpu -rA -s sizing/tests/placement/test_fit_oracle_devices.py

setup: $(VENV)/.installed
	$(BIN)/python manage.py migrate --verbosity 0
	$(BIN)/python manage.py import_bench --if-new --demo $(DEMO)

bench: setup $(VENV)/.dev-installed
	scripts/ensure-chromium.sh
	$(BIN)/python bench/import_speed.py
	$(BIN)/python bench/import_memory.py
	$(BIN)/python bench/run_list_speed.py
	$(BIN)/python bench/chart_speed.py
	$(BIN)/python bench/compression.py
	$(BIN)/python bench/client_speed.py --server-bench "$$(bench/fetch-server-bench.sh)"
	KVLAB_LLAMA_SERVER="$$(scripts/build-llama-server.sh)" $(BIN)/python bench/telemetry_overhead.py
	$(BIN)/python bench/load_test.py
	$(BIN)/python bench/sizing_speed.py
	$(BIN)/python bench/speed_accuracy.py
	$(BIN)/python bench/prefill_cost.py
	$(BIN)/python bench/bounded_pages.py
	$(BIN)/python bench/bounded_pages.py --engine postgres
	$(BIN)/python bench/explain_plans.py
	$(BIN)/python bench/explain_plans.py --engine postgres
	$(BIN)/python bench/scale_fill.py
	$(BIN)/python bench/scale_pages.py
	$(BIN)/python bench/scale_paint.py
	$(BIN)/python bench/explain_plans.py --database-url "sqlite:///$(HOME)/.cache/kvlab/scale/sqlite-1000000/kvlab.sqlite3"
	$(BIN)/python bench/scale_fill.py --engine postgres
	$(BIN)/python bench/scale_pages.py --engine postgres
	$(BIN)/python bench/explain_plans.py --database-url "$$(scripts/ensure-postgres.sh | tail -n 1 | sed 's|/[^/]*$$|/kvlab_scale|')"

# Opt-in: kvlab's TTFT/ITL/throughput against GuideLLM's on the same real llama-server
# (installs guidellm, with torch, into its own venv under ~/.cache/kvlab on first use).
crosscheck: setup $(VENV)/.dev-installed
	KVLAB_LLAMA_SERVER="$$(scripts/build-llama-server.sh)" $(BIN)/python bench/guidellm_agreement.py

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.dev-installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

user: setup
	$(BIN)/python manage.py createsuperuser

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kvlab needs Python 3.11 or newer; found " + sys.version.split()[0])'

$(BIN)/python: | check-python
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: requirements.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.dev-installed: requirements-dev.txt $(VENV)/.installed
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $@
