# tether developer commands. `make serve` and `make test` work on a fresh machine.
.PHONY: setup serve test test-fast test-clients lint bench eval clean

VENV := .venv
PY := $(VENV)/bin/python

setup:
	scripts/setup.sh

serve: setup
	$(VENV)/bin/tether serve $(ARGS)

lint: setup
	$(VENV)/bin/ruff check tether tests benchmarks examples
	$(VENV)/bin/ruff format --check tether
	$(VENV)/bin/mypy

test: setup lint
	$(VENV)/bin/pytest -W error -q -m "not clients" $(ARGS)

# Real coding clients (opencode, Continue CLI, aider) against tether serve; installs them first.
test-clients: setup
	scripts/install_clients.sh
	$(VENV)/bin/pytest -W error -q -m clients tests/clients -rA $(ARGS)

test-fast:
	$(VENV)/bin/pytest -W error -q -m "not model and not e2e" $(ARGS)

bench: setup
	$(PY) -m benchmarks.bench_serve

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
