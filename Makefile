# The two commands of the README. Both set up .venv first (once; later runs skip it).
ROUNDS ?= 20

.PHONY: setup run test bench

setup:
	@scripts/setup.sh

run: setup
	.venv/bin/sapo-engine run --model smollm2-135m --offline --rounds $(ROUNDS)

test: setup
	QT_QPA_PLATFORM=offscreen .venv/bin/python -m pytest -q -p no:cacheprovider

bench: setup
	.venv/bin/python benchmarks/bench_rollout.py
