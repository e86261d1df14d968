"""One SAPO Swarm node: draws questions, samples rollouts with llama.cpp, scores, shares, trains a LoRA. No Qt here."""

import os

# llama.cpp's and torch's worker threads are GNU OpenMP threads, which by default spin 300,000 times at each barrier
# before sleeping. Beside other CPU work (a volunteer's own programs, a second engine) the spinning thread burns the
# time slice of the one it waits for: two engines on 2 cores took ~370 s each instead of ~24 s, and a short spin
# costs a lone engine nothing measurable (docs/BENCHMARKS.md, "A node beside other CPU work"). libgomp reads this
# once, when it is loaded, so it is set here, before any engine module imports torch or llama_cpp; a value the
# user set wins.
CPU_SPIN = "1000"
os.environ.setdefault("GOMP_SPINCOUNT", CPU_SPIN)
