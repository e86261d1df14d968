"""What the benchmarks that run whole versions side by side (bench_round, bench_eval, bench_experiment) share.

Each runs ``python -m engine ...`` in an older checkout and in this one; the flags here make that the same work.
"""

# The easy preset's tasks as d9a16b6 (the speed issue's baseline) drew them, in its order: since e7d6a80 the
# preset leaves leap years out, so a version's defaults alone would no longer be the same work as the baseline's.
SAME_TASKS = ["--tasks", "basic_arithmetic,chain_sum,calendar_arithmetic,gcd"]
