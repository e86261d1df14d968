"""The sandbox: every reasoning-gym scoring and every regeneration of a peer's task runs here.

A small pool of long-lived worker processes (``python -m engine.sandbox``), started once per
node. Each job is one group: regenerate its spec, compare the question and answer it carries,
score all its answers; one request line, one reply line, msgspec JSON over the worker's pipes
(never pickle: a reply is data, not objects). The second wall behind ``engine.sandbox.safe_scoring``:

- POSIX ``resource`` limits in the worker: address space (``memory_mb``), CPU seconds per job
  (the soft RLIMIT_CPU is moved before each job, by the parent where the worker may not change
  its own limits; SIGXCPU ends the worker), no core files and no file writes (RLIMIT_FSIZE 0).
- on Linux, the jail (``engine.sandbox.jail``: Landlock and seccomp), locked once the worker has
  imported reasoning-gym and before it reads its first job; the worker reports what of it could
  not be applied, and the parent logs that as "jail unavailable: <why>".
- an environment of the few variables Python needs, not the node's (no tokens, no paths).
- a wall-clock timeout per job in the parent, on every platform (Windows: this and the kill
  are all there is); a worker that overruns is killed and a fresh one started.
- a failed job is a clear result: every score 0 and a reason (``timeout``, ``worker_died``).

Hand-written: the pieces are the standard library's (subprocess, resource, threads); no
library runs untrusted-input jobs in limited long-lived workers without pickle.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, BinaryIO

import msgspec

from engine.sandbox.safe_scoring import ANSWER_CPU_S, OverBudget, cpu_limit
from engine.tasks import hashseed
from wire.protocol import TaskSpec

# Work per job, from measured honest cost (CPU seconds, docs/SECURITY.md "Bounded cost per sender"): the slowest
# honest generation of the presets' and ANY_TASK_CAPS' tasks is 0.9 s (puzzle24; bf at difficulty 2: 0.5 s), the
# slowest honest answer 0.22 s (intermediate_integration), most tasks a millisecond. Inside the worker, generation
# gets GENERATION_CPU_S, each answer ANSWER_CPU_S (engine.sandbox.safe_scoring), the whole job JOB_CPU_S: past
# them the job ends softly ("timeout", the worker lives on). The parent's wall-clock timeout is the backstop
# (a loaded machine, a scorer stuck in C code): twice the job's CPU budget.
GENERATION_CPU_S = 2.0
JOB_CPU_S = 3.0
DEFAULT_TIMEOUT_S = 2 * JOB_CPU_S
DEFAULT_MEMORY_MB = 1536  # a worker with reasoning-gym loaded uses ~200 MB of address space
STARTUP_TIMEOUT_S = 120.0  # importing reasoning-gym takes ~1 s on an idle machine
MAX_JOB_CPU_S = 60
# What the parent reads of a worker: a reply is a few scores and a reason, far under MAX_REPLY_BYTES, and the protocol
# has one line out at a time (the ready line, then a reply per request). A worker taken over by the code it runs
# could write without end; the parent's memory stays bounded by these two.
MAX_REPLY_BYTES = 1 << 16
MAX_PENDING_LINES = 2
# Variables a worker keeps from the node's environment: what Python needs to start and find its code
# (LD_LIBRARY_PATH: a Python built elsewhere may need it to load; SYSTEMROOT, TEMP: Windows').
WORKER_ENV = ("PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONUTF8", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "LC_CTYPE",
              "TZ", "SYSTEMROOT", "WINDIR", "TEMP", "TMP")
# Tests only: a worker that finds this variable set to "1" has the first wall off: it scores with
# reasoning-gym's own scorers (eval and all) and runs ``_Request.probe`` code in a job's place. The
# parent never passes it on (it is not in WORKER_ENV); a test's own _Worker subclass does.
PROBES_ENV = "SAPO_SANDBOX_TEST_PROBES"

log = logging.getLogger(__name__)


class Job(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One group to score: its spec, the answers extracted from its completions (None: no answer).

    ``question``/``answer``: when set, what the regenerated question and answer must equal (a
    peer's claims); a mismatch is the job's reason and nothing is scored.
    """

    spec: TaskSpec
    answers: list[str | None]
    question: str | None = None
    answer: str | None = None


class Result(msgspec.Struct, frozen=True):
    """Task scores in [0, 1], one per answer; ``reason`` None when the job ran to the end.

    The bounds are checked where a worker's reply is decoded (a worker taken over may write anything): a score
    outside [0, 1], or a reason or key longer than any a worker makes, is no reply."""

    scores: list[Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]]
    # bad_spec, question_mismatch, answer_mismatch, timeout, worker_died, error: <type>; a probe's answer in tests
    reason: Annotated[str, msgspec.Meta(max_length=512)] | None = None
    # the regenerated question's content key (engine.tasks.questions.content_key)
    key: Annotated[str, msgspec.Meta(max_length=256)] | None = None
    seconds: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0

    @property
    def ok(self) -> bool:
        return self.reason is None


class _Request(msgspec.Struct, frozen=True):
    id: int
    job: Job
    cpu_s: int  # 0: the parent has set the worker's CPU limit itself
    probe: str | None = None  # tests only (PROBES_ENV): code to run in the job's place


class _Ready(msgspec.Struct, frozen=True):
    """A worker's first line: it has loaded reasoning-gym and locked its jail, except for ``unjailed``."""

    unjailed: list[str]


class _Reply(msgspec.Struct, frozen=True):
    id: int
    result: Result


def failed(job: Job, reason: str, seconds: float = 0.0) -> Result:
    return Result([0.0] * len(job.answers), reason, None, seconds)


def score_groups(sandbox: "Sandbox", groups: list[tuple[Any, list[Any]]],
                 format_bonus: float) -> list[tuple[list[Any], Result]]:
    """Own completions scored: one job per (Question, completions) group, run in parallel; per group
    its ``Score``s (engine.tasks.rewards) and the job's result (``ok`` False: the scorer failed, all 0)."""
    from engine.tasks.rewards import extract_answer, make_score
    from engine.sandbox.safe_scoring import capped

    jobs = [Job(q.spec, [capped(extract_answer(c.text)) for c in cs]) for q, cs in groups]
    results = sandbox.run(jobs)
    return [([make_score(ts, c.text, format_bonus) for ts, c in zip(result.scores, cs)], result)
            for (q, cs), result in zip(groups, results)]


# --- the worker side -------------------------------------------------------------------------

def run_job(job: Job) -> Result:
    """What a worker does for one job. Runs reasoning-gym: call it only inside a worker (or a test)."""
    from engine.tasks.rewards import answer_score
    from engine.sandbox.safe_scoring import score_answer
    from engine.tasks.questions import content_key, regenerate, scorer_for

    t0, c0 = time.perf_counter(), time.process_time()
    try:
        with cpu_limit(GENERATION_CPU_S):
            q = regenerate(job.spec)
    except OverBudget:  # settings whose generator loops or crawls: a soft timeout, the worker lives on
        return failed(job, "timeout", time.perf_counter() - t0)
    except Exception:  # noqa: BLE001 - unknown dataset or settings reasoning-gym rejects
        return failed(job, "bad_spec", time.perf_counter() - t0)
    key = content_key(job.spec.dataset, q.entry)
    for claimed, real, reason in ((job.question, q.question, "question_mismatch"),
                                  (job.answer, q.answer, "answer_mismatch")):
        if claimed is not None and claimed != real:
            return Result([0.0] * len(job.answers), reason, key, time.perf_counter() - t0)
    ds = scorer_for(job.spec)
    scorer = _SafeScorer(job.spec.dataset, ds)
    scores = []
    for a in job.answers:  # every answer within ANSWER_CPU_S, all of them within JOB_CPU_S
        left = JOB_CPU_S - (time.process_time() - c0)
        if left <= 0:  # the answers scored so far keep their scores (own groups use them), the rest 0
            rest = [0.0] * (len(job.answers) - len(scores))
            return Result(scores + rest, "timeout", key, time.perf_counter() - t0)
        scorer.cpu_s = min(ANSWER_CPU_S, left)
        scores.append(answer_score(scorer, q.entry, a))
    return Result(scores, None, key, time.perf_counter() - t0)


class _SafeScorer:
    def __init__(self, dataset: str, ds: Any) -> None:
        self.dataset, self.ds = dataset, ds
        self.cpu_s = ANSWER_CPU_S

    def score_answer(self, answer: str | None, entry: dict[str, Any]) -> float:
        from engine.sandbox.safe_scoring import score_answer

        return score_answer(self.dataset, self.ds, answer, entry, self.cpu_s)


def _limit(memory_mb: int) -> None:
    try:
        import resource
    except ImportError:  # Windows: the parent's timeout and kill are the limits
        return
    mem = memory_mb * 1024 * 1024
    for name, value in (("RLIMIT_AS", mem), ("RLIMIT_CORE", 0), ("RLIMIT_FSIZE", 0)):
        lim = getattr(resource, name, None)
        if lim is not None:
            _, hard = resource.getrlimit(lim)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(lim, (value, value))


def _cpu_budget(seconds: int) -> None:
    """Let the coming job use ``seconds`` more CPU seconds; SIGXCPU ends the worker after that."""
    try:
        import resource
    except ImportError:
        return
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(used.ru_utime + used.ru_stime) + seconds
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _give_cpu(pid: int, seconds: int) -> bool:
    """The parent's ``_cpu_budget`` for worker ``pid`` (prlimit; Linux): False where it cannot set it."""
    import psutil

    if not hasattr(psutil.Process, "rlimit"):
        return False
    try:
        proc = psutil.Process(pid)
        used = proc.cpu_times()
        _, hard = proc.rlimit(psutil.RLIMIT_CPU)
        soft = math.ceil(used.user + used.system) + seconds
        if hard != psutil.RLIM_INFINITY:
            soft = min(soft, hard)
        proc.rlimit(psutil.RLIMIT_CPU, (soft, hard))
    except psutil.Error:
        return False  # it has just died: the job finds that out
    return True


def _run_probe(code: str, job: Job) -> Result:
    """Tests only: ``code`` run where a scorer runs (its ``result`` or its exception comes back as the reason)."""
    space: dict[str, Any] = {}
    try:
        exec(code, space)  # noqa: S102 - reached only with PROBES_ENV, which no node sets
    except BaseException as exc:  # noqa: BLE001 - what the jail refused is the answer
        return failed(job, f"{type(exc).__name__}: {exc}"[:500])
    return failed(job, f"ok: {space.get('result')!r}"[:500])


def serve(memory_mb: int) -> None:
    """The worker's loop: requests on the original stdin, replies on the original stdout.

    Both are moved off fds 0 and 1 first, so nothing a scorer prints or reads can touch them.
    """
    import signal

    sys.dont_write_bytecode = True
    sys.set_int_max_str_digits(4300)  # the default, whatever the environment says
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file write fails (EFBIG) instead of killing us
    _limit(memory_mb)
    import reasoning_gym  # noqa: F401 - loaded once, before the first job's clock starts

    import engine.sandbox.safe_scoring
    import engine.tasks.questions  # loaded before the jail, like everything a job runs
    from engine.sandbox.jail import lock_down, read_only_paths

    probes = os.environ.get(PROBES_ENV) == "1"
    if probes:
        engine.sandbox.safe_scoring.SAFE_SCORERS.clear()  # tests only: the first wall off
    decoder = msgspec.json.Decoder(_Request)
    encoder = msgspec.json.Encoder()
    unjailed = lock_down(read_only_paths())  # everything it needs is loaded: from here on, code only reads code
    replies.write(encoder.encode(_Ready(unjailed)) + b"\n")
    replies.flush()
    for line in requests:
        req = decoder.decode(line)
        if req.cpu_s:
            _cpu_budget(req.cpu_s)
        try:
            if req.probe is not None:
                result = _run_probe(req.probe, req.job) if probes else failed(req.job, "probe_refused")
            else:
                result = run_job(req.job)
        except Exception as exc:  # noqa: BLE001 - a bug or MemoryError: this job fails, the worker goes on
            result = failed(req.job, f"error: {type(exc).__name__}"[:64])
        replies.write(encoder.encode(_Reply(req.id, result)) + b"\n")
        replies.flush()


# --- the parent side ---------------------------------------------------------------------------

class _Worker:
    """One worker process, restarted whenever it is killed or dies."""

    def __init__(self, memory_mb: int) -> None:
        self.memory_mb = memory_mb
        self.proc: subprocess.Popen[bytes] | None = None
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.ready = False
        self.unjailed: list[str] = []  # what of the jail its worker could not apply
        self.next_id = 0
        self.started = 0  # how many processes this slot has started (restarts = started - 1)
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(_Reply)

    def environment(self) -> dict[str, str]:
        """The worker's environment: WORKER_ENV from the node's, one thread per library, the fixed hash seed
        (the same question text as the node and its peers)."""
        kept = {k: v for k, v in os.environ.items() if k in WORKER_ENV}
        return {**hashseed.env(kept), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                "PYTHONDONTWRITEBYTECODE": "1"}  # one thread: the jail is locked from the only thread

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "engine.sandbox", str(self.memory_mb)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=self.environment(), close_fds=True)
        self.lines = queue.Queue()
        self.ready = False
        self.started += 1
        threading.Thread(target=_pump, args=(self.proc.stdout, self.lines), daemon=True).start()

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()  # type: ignore[union-attr]
                except OSError:
                    pass

    def _read(self, timeout: float) -> bytes | None:
        """The next line; None at end of output; raises queue.Empty on timeout."""
        return self.lines.get(timeout=timeout)

    def wait_ready(self) -> None:
        """Block until the worker has loaded reasoning-gym; OSError if it died doing so."""
        if not self.ready:
            line = self._read(STARTUP_TIMEOUT_S)
            try:
                ready = msgspec.json.decode(line or b"", type=_Ready)
            except (msgspec.DecodeError, RecursionError):
                raise BrokenPipeError("the worker did not start") from None
            if ready.unjailed and ready.unjailed != self.unjailed:  # said once, not at every restart
                for why in ready.unjailed:
                    log.warning("jail unavailable: %s", why)
            self.unjailed = ready.unjailed
            self.ready = True

    def call(self, job: Job, timeout_s: float, probe: str | None = None) -> Result:
        t0 = time.perf_counter()
        if self.proc is None or self.proc.poll() is not None:
            self.kill()
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.wait_ready()
            self.next_id += 1
            cpu = min(MAX_JOB_CPU_S, math.ceil(timeout_s))
            if _give_cpu(self.proc.pid, cpu):
                cpu = 0  # set from outside: the jailed worker cannot change its limits
            self.proc.stdin.write(self._encoder.encode(_Request(self.next_id, job, cpu, probe)) + b"\n")
            self.proc.stdin.flush()
            line = self._read(timeout_s)
        except queue.Empty:
            self.kill()
            return failed(job, "timeout", time.perf_counter() - t0)
        except OSError:  # broken pipe: it died before or while we wrote
            line = None
        if line is None:
            rc = self._reap()
            return failed(job, "timeout" if rc in _CPU_DEATHS else "worker_died", time.perf_counter() - t0)
        try:
            reply = self._decoder.decode(line)  # a score outside [0, 1] too (Result's bounds)
        except (msgspec.DecodeError, RecursionError):  # msgspec recurses into an unknown field's nesting
            self.kill()
            return failed(job, "worker_died", time.perf_counter() - t0)
        # out of step, or a score for each answer it was not asked: never trust this process again
        if reply.id != self.next_id or len(reply.result.scores) != len(job.answers):
            self.kill()
            return failed(job, "worker_died", time.perf_counter() - t0)
        return reply.result

    def _reap(self) -> int | None:
        proc = self.proc
        rc = None
        if proc is not None:
            try:
                rc = proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        return rc


def _signals(*names: str) -> frozenset[int]:
    import signal

    return frozenset(-int(getattr(signal, n)) for n in names if hasattr(signal, n))


_CPU_DEATHS = _signals("SIGXCPU", "SIGKILL")  # SIGKILL: the hard CPU limit


def _pump(stream: BinaryIO, lines: queue.Queue[bytes | None]) -> None:
    """Reader thread: the worker's reply lines into a queue (portable: no select on Windows pipes).

    A line longer than any reply, or a line while MAX_PENDING_LINES wait unasked for, ends the reading: b"" is
    queued (no reply decodes from it, so the caller kills that worker) and the worker is read no further.
    """
    try:
        while line := stream.readline(MAX_REPLY_BYTES + 1):
            if len(line) > MAX_REPLY_BYTES or lines.qsize() >= MAX_PENDING_LINES:
                lines.put(b"")
                break
            lines.put(line)
    except (OSError, ValueError):
        pass
    lines.put(None)


class Sandbox:
    """A pool of ``workers`` sandbox processes; ``run`` spreads a batch of jobs over them."""

    def __init__(self, workers: int = 2, timeout_s: float = DEFAULT_TIMEOUT_S,
                 memory_mb: int = DEFAULT_MEMORY_MB) -> None:
        if workers < 1:
            raise ValueError("a sandbox needs at least one worker")
        self.timeout_s = timeout_s
        self._workers = [_Worker(memory_mb) for _ in range(workers)]
        self._idle: queue.Queue[_Worker] = queue.Queue()
        for w in self._workers:
            w.start()  # import reasoning-gym now, not in the first round
            self._idle.put(w)
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox")
        self._closed = False

    @property
    def unjailed(self) -> list[str]:
        """What of the jail the workers could not apply ([]: all of it holds); valid after ``wait_ready``."""
        return sorted({why for w in self._workers for why in w.unjailed})

    @property
    def restarts(self) -> int:
        return sum(max(0, w.started - 1) for w in self._workers)

    def wait_ready(self) -> bool:
        """Block until every worker is up (a job's time then excludes startup); False if one is not."""
        ok = True
        for w in self._workers:
            try:
                w.wait_ready()
            except (OSError, queue.Empty):
                ok = False
        return ok

    def _one(self, job: Job) -> Result:
        w = self._idle.get()
        try:
            return w.call(job, self.timeout_s)
        finally:
            self._idle.put(w)

    def run(self, jobs: list[Job]) -> list[Result]:
        """One Result per job, in order; jobs run in parallel on the pool's workers."""
        if self._closed:
            raise RuntimeError("the sandbox is closed")
        if len(jobs) == 1:
            return [self._one(jobs[0])]
        return list(self._threads.map(self._one, jobs))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._threads.shutdown(wait=True)
        for w in self._workers:
            w.kill()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
