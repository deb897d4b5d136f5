# oscrepro — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PAPER ?= fqo
TABLE ?= 2
BUDGET ?= cpu
LAUNCHER ?= inprocess
ARGS ?=
TEST_WORKERS ?= 2  # pytest-xdist worker processes (each test process uses one torch thread)

.DEFAULT_GOAL := help
.PHONY: help install demo test test-all test-slurm slurm-up slurm-down lint format table table4 chaos claims decide leaderboard leaderboard-bench bench bench-loop clean

help: ## Show this help
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}'
	@echo "  Variables: PAPER=$(PAPER) TABLE=$(TABLE) BUDGET=$(BUDGET) (smoke|cpu|paper) LAUNCHER=$(LAUNCHER) ARGS='hydra overrides'"

$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	touch $@
	@echo "installed into $(VENV); torch: $$($(PY) -c 'import torch; print(torch.__version__)')"

# Said once, when it installs (above), not by every target that depends on install.
install: $(VENV)/.installed ## Create .venv and install the pinned dependencies (requirements.lock) + oscrepro
	@:

demo: install ## fqo Figure 2 + Table 2 at budget=cpu (9 short runs, 2 at a time)
	$(PY) -m oscrepro.table fqo/fig2 --budget cpu
	$(PY) -m oscrepro.table fqo/table2 --budget cpu --launcher joblib
	@echo "results: results/fqo/cpu/fig2.{md,csv,png} and results/fqo/cpu/table2.{md,csv} (paper budget: results/fqo/)"

test: install ## Fast offline test suite (what CI runs)
	$(PY) -m pytest -m "not slow and not slurm" -q -n $(TEST_WORKERS)

test-all: install ## Every test, slow ones included (but the SLURM ones: make test-slurm)
	$(PY) -m pytest -m "not slurm" -q -n $(TEST_WORKERS)

slurm-up: ## Start a single-node SLURM on this host (root; installs slurm-wlm, slurmdbd, mariadb-server where missing)
	scripts/slurm_up.sh

slurm-down: ## Stop the SLURM daemons that slurm-up started (by their pids)
	scripts/slurm_down.sh

test-slurm: install ## The tests against the SLURM scheduler (after make slurm-up); ARGS='-m slurm' adds the slow time-limit one
	$(PY) -m pytest -q $(or $(ARGS),-m "slurm and not slow") tests/slurm

lint: install ## Ruff lint
	$(PY) -m ruff check oscrepro tests

format: install ## Ruff format + import sorting
	$(PY) -m ruff check --fix --select I oscrepro tests
	$(PY) -m ruff format oscrepro tests

table: install ## Build one table: make table PAPER=fqo TABLE=2 BUDGET=cpu [LAUNCHER=joblib] [ARGS='trainer=gpu']
	$(PY) -m oscrepro.table $(PAPER)/table$(TABLE) --budget $(BUDGET) --launcher $(LAUNCHER) $(ARGS)

table4: install ## fqo Table 4 + Figure 6 (d_osc sweep on WikiText-2 and TinyStories)
	$(MAKE) table PAPER=fqo TABLE=4

chaos: install ## SIGKILL a smoke table build 24 times at random moments; final table and every run's metrics vs an uninterrupted build
	$(PY) -m oscrepro.tables.chaos --kills 24 --seed 7 --out results/chaos/fqo_table2_smoke.md trainer.max_epochs=6 trainer.limit_train_batches=8

claims: install ## Check every claim written in the table specs against the committed tables -> results/CLAIMS.md (no training)
	$(PY) -m oscrepro.claims

decide: install ## Rank inconclusive claims by cost per expected decision and train their next planned look [ARGS='--core-hours 2 [--dry-run]']
	$(PY) -m oscrepro.claims.decide --budget $(BUDGET) $(ARGS)

leaderboard: install ## Every mechanism on five tasks at matched parameters -> results/leaderboard.md + .png [ARGS='--render-only']
	$(PY) -m oscrepro.leaderboard --budget $(BUDGET) $(ARGS)

leaderboard-bench: install ## The leaderboard's cost columns (one block vs softmax, one process) -> results/bench/leaderboard.md
	$(PY) -m oscrepro.leaderboard.bench $(ARGS)

bench: install ## Mechanism vs softmax block benchmark (ratios in one process): make bench ARGS='block=ssa'
	$(PY) -m oscrepro.bench $(ARGS)

bench-loop: install ## Training-loop overhead (loop vs bare step): results/bench/loop_overhead.md; ARGS=--bf16 adds bf16 speed-ups
	$(PY) -m oscrepro.bench.loop --out results/bench/loop_overhead.md $(ARGS)

# What `make clean` may remove: caches, logs, sweep outputs, and under results/runs whatever git does not track
# (checkpoints, logs, locks, new records). Run records and tables that git tracks are never removed: `git clean -x`
# leaves every file in git's index. Outside a git checkout nothing tells a committed record from a new one, so only
# what .gitignore says is never committed goes (checkpoints, logs, locks, temporary files).
CLEAN_PATHS := results/runs results/hydra results/wandb results/submitit .cache .pytest_cache .ruff_cache lightning_logs outputs multirun
DRY_RUN ?=

clean: ## Remove caches, checkpoints, logs and untracked run records; never a file git tracks [DRY_RUN=1 lists]
	@if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
		git clean $(if $(DRY_RUN),-n,-f) -d -x -- $(CLEAN_PATHS); \
	else \
		echo "not a git checkout: run records kept (nothing tells committed from new); checkpoints, logs, caches go"; \
		for d in $(CLEAN_PATHS); do [ -e "$$d" ] || continue; \
			if [ "$$d" = results/runs ]; then \
				find "$$d" \( -type d \( -name checkpoints -o -name logs -o -name eval -o -name '.recover-*' \) -prune \) \
					-o \( -type f \( -name lock -o -name '*.tmp' \) \) | { if [ -n "$(DRY_RUN)" ]; then sed 's/^/Would remove /'; \
					else xargs -r rm -rf; fi; }; \
			elif [ -n "$(DRY_RUN)" ]; then echo "Would remove $$d"; else rm -rf "$$d"; fi; \
		done; \
	fi
	@find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune $(if $(DRY_RUN),-printf 'Would remove %p/\n',-exec rm -rf {} +)

# --- report (issue 36): static HTML of the committed results, and the browser that tests it ---------------------
.PHONY: report browser test-browser
report: install ## Static HTML of every committed table, figure and claim -> results/index.html (no training)
	$(PY) -m oscrepro.report

browser: ## Install Debian's chromium (apt-get) for the report's browser test, when missing
	@command -v chromium >/dev/null 2>&1 || { $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y -q chromium; }
	@# Debian's launcher script (/etc/chromium.d/dev-shm) prints '[: N: unexpected operator' when findmnt lists /dev/shm
	@# twice: its stderr is shown only if the version check itself fails
	@chromium --version 2>/dev/null || chromium --version

test-browser: install browser ## The report in headless chromium: pages load, images and links resolve, a screenshot
	$(PY) -m pytest -q -m browser tests/integration/test_report_browser.py
# --- end report ------------------------------------------------------------------------------------------------
