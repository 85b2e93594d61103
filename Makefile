# etdeploy: `make demo` and `make test` are the quick start; both set up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.etdeploy-installed

.PHONY: setup demo test lint docs bench clean system-packages

setup: $(STAMP) system-packages

# Re-install when the package definition changes; otherwise this is a no-op.
# The build extra (torch, executorch, what compiles runners) with the pair pinned by
# constraints.txt, and the test tools; `pip install .` alone is the torch-free base.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[build,test,docs,explore,history]'
	$(BIN)/python -c 'import torch, executorch' # fail here, not in the first test
	touch $(STAMP)

# sshd for the SSH transport tests, Chromium for the HTML report's browser test,
# the aarch64 cross compiler for the arm64 runner and qemu-user to run it in tests,
# PostgreSQL for the shared history's tests (Debian keeps initdb and pg_ctl in
# /usr/lib/postgresql/VERSION/bin; the tests start their own server there).
# Best effort: without root or apt those tests skip with a message saying so,
# everything else still runs.
SYSTEM_PACKAGES := openssh-server openssh-client chromium g++-aarch64-linux-gnu qemu-user postgresql
system-packages:
	@if [ -x /usr/sbin/sshd ] && [ -x /usr/bin/chromium ] && [ -x /usr/bin/qemu-aarch64 ] \
		&& command -v aarch64-linux-gnu-g++ >/dev/null \
		&& ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing $(SYSTEM_PACKAGES) (SSH, HTML report, arm64 and history tests)"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(SYSTEM_PACKAGES) >/dev/null) \
		|| echo "warning: could not install $(SYSTEM_PACKAGES); those tests will skip"; \
	else echo "note: sshd or chromium missing and cannot apt-get; those tests will skip"; fi

# The main job on the embedded default: build digits, run it with the real runner
# on this machine, verify against eager PyTorch, size-check it.
demo: setup
	mkdir -p out
	$(BIN)/etdeploy run digits --device local --json out/digits-result.json

LINTED := etdeploy tests benchmarks docs/hooks

# mypy reads its settings (strict, what is not yet) from pyproject.toml's [tool.mypy].
lint: setup
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

# The documentation site, strictly: a broken link, a missing anchor or any warning
# fails. The reference pages are generated from this checkout's code by
# docs/hooks/reference.py. Material's end-of-life banner (9.8.2: maintained until
# 2027-05-05) is not a warning about these docs, so it is turned off.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The suite in two processes, a file's tests in one of them (its module's servers and
# programs made once); then the tests that take every core, alone (marked serial).
test: setup
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	$(MAKE) --no-print-directory docs
	$(BIN)/python -m pytest -q -ra --durations=25 -n 2 --dist loadfile -m "not serial"
	$(BIN)/python -m pytest -q -ra -m serial

bench: setup
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache
