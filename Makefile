# The two commands of the README. Both set up .venv first (once; later runs skip it).
ROUNDS ?= 20

.PHONY: setup run test bench fixtures sysdeps

setup:
	@scripts/setup.sh

run: setup
	.venv/bin/sapo-engine run --model smollm2-135m --offline --rounds $(ROUNDS)

# Test-only model files (Gemma 3 270M: Google's Gemma terms), fetched once into a cache, never bundled.
fixtures: setup
	@scripts/test-fixtures.sh >/dev/null

# redis-server, chromium and Xvfb for the tests that start them (apt when root; otherwise those tests skip).
sysdeps:
	@scripts/system-deps.sh || true

# On WORKERS processes (pytest-xdist), a test file to a worker; `make test WORKERS=0` runs in this process.
WORKERS ?= 2
test: setup fixtures sysdeps
	QT_QPA_PLATFORM=offscreen .venv/bin/python -m pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadfile --no-loadscope-reorder --durations=30

bench: setup
	.venv/bin/python benchmarks/bench_rollout.py
