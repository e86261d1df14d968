"""What the benchmarks that run whole versions side by side (bench_round, bench_eval, bench_experiment) share.

Each runs ``python -m engine ...`` in an older checkout and in this one; the flags here make that the same work.
"""

from pathlib import Path

# The easy preset's tasks as d9a16b6 (the speed issue's baseline) drew them, in its order: since e7d6a80 the
# preset leaves leap years out, so a version's defaults alone would no longer be the same work as the baseline's.
SAME_TASKS = ["--tasks", "basic_arithmetic,chain_sum,calendar_arithmetic,gcd"]
# ...and gcd over numbers to 10, as d9a16b6's preset had it (the preset's gcd goes to 20 since run 14).
SAME_SETTINGS = "[task_config.gcd]\nmax_value = 10\n"


def same_work(tree: Path, command: str, work: Path) -> list[str]:
    """Flags that make ``tree``'s ``engine <command>`` do d9a16b6's work. A version whose command takes no
    ``--config`` (d9a16b6's `experiment`) has those settings as its preset's already."""
    flags = list(SAME_TASKS)
    if _takes_config(tree, command):
        settings = work.with_name(work.name + "-same-work.toml")  # beside the run's folder, not in it
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(SAME_SETTINGS)
        flags += ["--config", str(settings)]
    return flags


def _takes_config(tree: Path, command: str) -> bool:
    if command == "run":
        return True  # `run --config` is as old as the engine
    source = tree / "engine" / "lab" / "experiment.py"  # the layout since the engine was grouped by stage
    return source.exists() and '"--config"' in source.read_text()
