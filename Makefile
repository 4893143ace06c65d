# Everything a newcomer needs: `make demo` runs Caravel end to end on SQLite; `make test` runs
# lint, types and the whole suite against SQLite, PostgreSQL and MariaDB. Both create .venv
# themselves.
# `make check` is the fast tier: lint, types and every test not marked slow (tests/README.md).
# `make dist` builds the sdist and the wheel that docs/install.md installs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# `make demo` needs only the package and its web extra (the worker sample uses no extra; the
# `caravel dashboard` it suggests next needs `web`), so a fresh clone's first command does not
# wait for the test tools; the dev install satisfies it too.
DEMO_STAMP := $(VENV)/.installed-demo
# `make dist` needs only pypa's `build` (the dev install has it too).
BUILD_STAMP := $(VENV)/.installed-build
# Where `make dist` writes the sdist and the wheel.
DIST ?= dist

# The suite runs on this many pytest-xdist workers (each with databases of its own; tests marked
# `serial` share one worker). PYTEST_WORKERS=0 runs it in this process; PYTEST_ARGS go last, so
# `PYTEST_ARGS="-n 0 -x tests/unit"` works too.
PYTEST_WORKERS ?= 3
XDIST := -n $(PYTEST_WORKERS) --dist loadgroup

# caravel.contrib.django on its second track: Django 6 (django.tasks) needs Python 3.12, so its
# tests also run in .venv312, made from the first ~/.pyenv/versions/3.12*/bin/python (or
# PYTHON312=...). Without one the target says so and passes, except under CI=true, which needs it.
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python))
VENV312 ?= .venv312
STAMP312 := $(VENV312)/.installed
# Its Django is pinned, to the version whose own Tasks tests tests/django/test_upstream.py
# downloads (from that version's sdist, into the git-ignored .cache/) and runs against our
# backend; the job also runs the Django guide's blocks on Django 6.
DJANGO_PIN := tests/django/upstream/constraints.txt
DJANGO_TESTS ?= tests/django tests/samples/django tests/docs/test_docs.py
DJANGO_SELECT ?= -k "not test_block or guides/django.md"

# What happens at interpreter exit is tested under every supported Python
# (tests/acceptance/test_exit.py): 3.11 in .venv, 3.12 in .venv312, and 3.13 in .venv313, made
# from the first ~/.pyenv/versions/3.13*/bin/python (or PYTHON313=...) with the package, the MariaDB drivers and
# Django only. `make interpreters` makes those it has a Python for, once (they are rebuilt
# when pyproject.toml changes); under CI=true those tests fail for a version it could not make.
PYTHON313 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python))
VENV313 ?= .venv313
STAMP313 := $(VENV313)/.installed

.PHONY: install demo dist test check lint typecheck pytest pytest-fast test-django312 interpreters bench bench-quick soak clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP) $(DEMO_STAMP) $(BUILD_STAMP)

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[web]"
	touch $(DEMO_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	PYTHON=$(BIN)/python scripts/demo.sh

$(BUILD_STAMP): | $(BIN)/python
	$(BIN)/python -m pip install --quiet "build>=1.2,<2"
	touch $(BUILD_STAMP)

# What pip installs where there is no clone (docs/install.md): the sdist and the wheel, built
# by `python -m build` (the wheel from the sdist, so a file the sdist leaves out fails here).
# Earlier builds of caravel-queue in $(DIST) are removed first, so `$(DIST)/*.whl` is this one.
dist: $(BUILD_STAMP)
	rm -f $(DIST)/caravel_queue-*
	$(BIN)/python -m build --quiet --outdir $(DIST) .
	@ls -1 $(DIST)/caravel_queue-*

lint: $(STAMP)
	$(BIN)/ruff check src tests samples
	$(BIN)/ruff format --check src tests samples

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

pytest: $(STAMP)
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

pytest-fast: $(STAMP)
	$(BIN)/python -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

$(STAMP312): pyproject.toml $(DJANGO_PIN)
	$(PYTHON312) -m venv $(VENV312)
	$(VENV312)/bin/python -m pip install --quiet --upgrade pip
	$(VENV312)/bin/python -m pip install --quiet -e ".[dev]" -c $(DJANGO_PIN)
	touch $(STAMP312)

$(STAMP313): pyproject.toml
	$(PYTHON313) -m venv $(VENV313)
	$(VENV313)/bin/python -m pip install --quiet --upgrade pip
	$(VENV313)/bin/python -m pip install --quiet -e ".[django,mariadb]"
	touch $(STAMP313)

interpreters: $(if $(PYTHON312),$(STAMP312)) $(if $(PYTHON313),$(STAMP313))

ifeq ($(PYTHON312),)
test-django312:
	@if [ "$$CI" = "true" ]; then \
		echo "test-django312: no Python 3.12 under ~/.pyenv/versions (set PYTHON312); CI needs it"; \
		exit 1; \
	fi
	@echo "test-django312: skipped, no Python 3.12 under ~/.pyenv/versions (set PYTHON312)"
else
test-django312: $(STAMP312)
	$(VENV312)/bin/python -m pytest $(XDIST) $(DJANGO_SELECT) $(DJANGO_TESTS)
endif

test: lint typecheck interpreters pytest test-django312

check: lint typecheck pytest-fast

# Throughput and latency on PostgreSQL and SQLite, and on MariaDB when its server answers at
# CARAVEL_BENCH_MARIADB_URL (the local one by default; its rows are left out, saying why, when it
# does not, and under CI=true that fails instead), and Caravel against its peers (pgqueuer,
# procrastinate, oban in a Python 3.12 virtual environment the bench makes under bench/.venvs,
# and graphile-worker 0.17.3 under Node.js 20, its packages installed by npm ci into
# bench/adapters/graphile on first use, its node process's CPU counted as its own) on
# PostgreSQL, each at the worker settings a sweep finds best on this machine; medians of three
# runs; prints the figures and writes JSON under bench/results/. The comparison runs in
# BENCH_SITTINGS sittings (the sweep only in the first, the others at the settings it chose, one
# JSON each) and ends by printing the tables docs/performance.md shows (bench/page.py), over all
# of them. One sitting of the comparison took 23 minutes on an idle 2-core machine with run J's
# narrower sweep and without graphile-worker; the whole of `make bench` takes well over an hour.
# BENCH_ARGS="--only compare --backends postgresql" for the comparison alone, or
# BENCH_SITTINGS=1 for one sitting. `python -m bench.page FILE...` prints the tables again
# from saved sittings.
BENCH_SITTINGS ?= 3
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev,bench]"
	$(BIN)/python -m bench --sittings $(BENCH_SITTINGS) $(BENCH_ARGS)

# The comparison for development: drains of 5,000 jobs, one run of each measurement, no sweep
# (each library at the middle of its grid), one sitting, then the page's tables: 3 min 16 s on
# 2026-12-06 on the 2-core machine while other work ran (load average 1.7 to 4, so every reading
# was taken three times), before graphile-worker joined the peers; less on a quiet machine.
# Then MariaDB's rows at the same small sizes (one-call and bulk enqueue, the drain, a polling
# worker's wake-up, the server's own commit rate), when its server answers (as for `make bench`):
# 42 s on 2026-12-06 at load average 1. BENCH_MARIADB_ARGS go last there.
BENCH_MARIADB_QUICK := --quick --backends mariadb --if-reachable --only enqueue bulk drain latency commit
bench-quick: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev,bench]"
	$(BIN)/python -m bench --quick --only compare --backends postgresql $(BENCH_ARGS)
	$(BIN)/python -m bench $(BENCH_MARIADB_QUICK) $(BENCH_MARIADB_ARGS)

# The fault-injection soak (docs/reliability.md): a seeded schedule of SIGKILL and SIGSTOP over
# several worker processes, then the checker, for four scenarios (a mix of jobs, concurrency
# limits, a rate, both limits and the rate on two network hosts); prints its figures as JSON per
# scenario and database (SQLite, PostgreSQL, MariaDB). Ten minutes per scenario and database by
# default, two hours in all; SOAK_ARGS="--duration 120 --seed 7 --backend sqlite --scenario
# limits" for less.
SOAK_ARGS ?= --duration 600 --seed 1 --backend all
soak: $(STAMP)
	$(BIN)/python -m tests.faults.soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) $(VENV312) $(VENV313) .pytest_cache .mypy_cache .ruff_cache .hypothesis .cache
