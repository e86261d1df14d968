"""The second wall's jail (engine/sandbox/jail.py): each denial tried by code running inside a real worker.

The first wall is off for these tests only: a worker started with PROBES_ENV scores with
reasoning-gym's own scorers (one test sends code in answers that binary_matrix's ``eval`` runs), and
runs a request's ``probe`` code where a scorer runs, after its jail is locked, as an answer that got
past the safe scorers to an ``eval`` would. Only a ``_Worker`` subclass of a test sets that variable: the node's
own workers keep WORKER_ENV from its environment and nothing else, and a peer only ever supplies a
``Job`` (its spec and answers), never a request; a worker without the variable refuses probes
(tested below). Each probe reports its ``result`` or the exception that stopped it.
"""

from __future__ import annotations

import ast
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgspec
import psutil
import pytest

from engine.sandbox.jail import read_only_paths
from engine.sandbox.safe_scoring import SAFE_SCORERS, score_answer
from engine.sandbox.workers import DEFAULT_MEMORY_MB, PROBES_ENV, Job, Result, Sandbox, _Worker
from engine.tasks import hashseed
from engine.tasks.questions import (ANY_TASK_CAPS, EASY_CONFIGS, PAPER_TASKS, QuestionStream, TaskEntry, build_mix,
                                   scorer_for)
from tests.children import kill
from wire.protocol import TaskSpec


def _jail_missing() -> str | None:
    """Why this kernel cannot hold the whole jail; None when it can, and then every test here must pass
    (landlockpy and pyseccomp are dependencies on Linux: their absence fails, it does not skip)."""
    if not sys.platform.startswith("linux"):
        return "no Landlock or seccomp off Linux"
    import landlockpy

    if landlockpy.abi_version() < 6:
        return f"the kernel's Landlock ABI is {landlockpy.abi_version()}, the jail needs 6 (signal scoping)"
    return None


pytestmark = pytest.mark.skipif(_jail_missing() is not None, reason=f"jail unavailable here: {_jail_missing()}")

SPEC = TaskSpec(dataset="basic_arithmetic", config={}, seed=1, index=0)


class ProbeWorker(_Worker):
    def environment(self) -> dict[str, str]:
        return {**super().environment(), PROBES_ENV: "1"}

    def probe(self, code: str) -> str:
        return self.call(Job(SPEC, []), 10.0, probe=textwrap.dedent(code)).reason or ""


@pytest.fixture(scope="module")
def worker():
    w = ProbeWorker(DEFAULT_MEMORY_MB)
    w.start()
    w.wait_ready()
    yield w
    w.kill()


@pytest.fixture
def secret(tmp_path):
    """A private key outside every path the worker may read, as the node's data dir holds one."""
    path = tmp_path / "node.key"
    path.write_text("-----BEGIN PRIVATE KEY-----\nsecret\n")
    path.chmod(0o600)
    return path


def test_the_whole_jail_holds_and_probes_run(worker):
    assert worker.unjailed == []
    assert worker.probe("result = 6 * 7") == "ok: 42"  # the switch works: the denials below are the jail's


def test_code_in_an_answer_that_reaches_eval_is_jailed(worker, tmp_path):
    # The first wall is off in this worker: binary_matrix's own scorer evals the answer.
    q = QuestionStream((TaskEntry("binary_matrix"),), "e" * 32, 0, []).draw(1)[0]
    marker = tmp_path / "marker"
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        only_eval_reads_this = f"[[int(c) for c in r.split()] for r in {q.answer!r}.splitlines()]"
        (r,) = worker.call(Job(q.spec, [only_eval_reads_this,
                                        f"__import__('socket').create_connection(('127.0.0.1', {port}))",
                                        f"open({str(marker)!r}, 'w')",
                                        f"__import__('os').system('touch {marker}')",
                                        f"open({str(Path.home() / '.bashrc')!r}).read()"]), 10.0),
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()
    assert r.ok and r.scores == [0.1, 0.0, 0.0, 0.0, 0.0]  # 0.1: the original's eval ran, where the first wall
    assert score_answer("binary_matrix", scorer_for(q.spec), only_eval_reads_this, q.entry) == 0.0  # gives 0
    assert not marker.exists()


def test_a_worker_without_the_test_switch_refuses_probes():
    w = _Worker(DEFAULT_MEMORY_MB)
    w.start()
    try:
        r = w.call(Job(SPEC, ["1"]), 10.0, probe="result = 1")
        assert r.reason == "probe_refused" and r.scores == [0.0]
    finally:
        w.kill()


def test_no_file_outside_the_code_can_be_read(worker, secret):
    assert worker.probe(f"result = open({str(secret)!r}).read()").startswith("PermissionError")
    assert worker.probe(f"import os; result = os.listdir({str(secret.parent)!r})").startswith("PermissionError")
    assert worker.probe("import os; result = os.listdir(os.path.expanduser('~'))").startswith("PermissionError")
    assert worker.probe("result = open('/etc/hostname').read()").startswith("PermissionError")
    # the code it runs stays readable: that is all it needs
    assert worker.probe("import engine.tasks.rewards as m; result = len(open(m.__file__).read()) > 0") == "ok: True"


def test_no_file_can_be_written_deleted_or_truncated(worker, secret, tmp_path):
    before = secret.read_bytes()
    for code in (f"open({str(tmp_path / 'new')!r}, 'w')",
                 f"open({str(secret)!r}, 'a').write('x')",
                 f"open({str(secret)!r}, 'w')",  # O_TRUNC
                 f"import os; os.truncate({str(secret)!r}, 0)",
                 f"import os; os.unlink({str(secret)!r})",
                 f"import os; os.rename({str(secret)!r}, {str(tmp_path / 'moved')!r})",
                 f"import os; os.mkdir({str(tmp_path / 'dir')!r})",
                 f"import os; os.link({str(secret)!r}, {str(tmp_path / 'hard')!r})",
                 f"import os; os.chmod({str(secret)!r}, 0o644)",
                 "import os, tempfile; tempfile.mkstemp()"):
        reason = worker.probe(code)
        assert reason.startswith(("PermissionError", "FileNotFoundError")), (code, reason)  # mkstemp: no dir it may use
    assert secret.read_bytes() == before and secret.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.key"]


def test_no_symlink_can_be_made(worker, secret, tmp_path):
    link = tmp_path / "link"
    assert worker.probe(f"import os; os.symlink({str(secret)!r}, {str(link)!r})").startswith("PermissionError")
    assert not link.is_symlink()


def test_no_network(worker, tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        reason = worker.probe(f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)")
        assert reason.startswith("PermissionError"), reason
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing came
    finally:
        listener.close()
    assert worker.probe("import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)").startswith("PermissionError")
    assert worker.probe("import socket; socket.socket(socket.AF_UNIX)").startswith("PermissionError")
    assert worker.probe("import socket; socket.socketpair()").startswith("PermissionError")


def test_no_new_process(worker, tmp_path):
    marker = tmp_path / "marker"
    for code in ("import os; os.fork()",
                 f"import subprocess; subprocess.run(['touch', {str(marker)!r}])",
                 f"import subprocess; subprocess.Popen(['touch', {str(marker)!r}], start_new_session=True)",
                 f"import os; os.posix_spawn('/usr/bin/touch', ['touch', {str(marker)!r}], {{}})",
                 f"import os; os.execv('/usr/bin/touch', ['touch', {str(marker)!r}])"):
        reason = worker.probe(code)
        assert reason.startswith("PermissionError"), (code, reason)
    time.sleep(0.2)
    assert not marker.exists()
    # threads still start (clone with CLONE_THREAD): libraries may use them
    assert worker.probe("""
        import threading
        out = []
        t = threading.Thread(target=lambda: out.append(1)); t.start(); t.join()
        result = out""") == "ok: [1]"


def test_no_signal_to_another_process(worker):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for code in (f"import os, signal; os.kill({other.pid}, signal.SIGKILL)",
                     f"import os; os.kill({other.pid}, 0)",
                     # signal 0 is the permission check alone: should the jail ever fail, these
                     # still kill nothing (the test runner, its process group, every process)
                     "import os; os.kill(os.getppid(), 0)",
                     "import os; os.kill(0, 0)",
                     "import os; os.kill(-1, 0)"):
            reason = worker.probe(code)
            assert reason.startswith("PermissionError"), (code, reason)
        assert other.poll() is None
    finally:
        kill(other)


def test_the_worker_cannot_kill_its_parent():
    # A sacrificial parent of our own: a node that starts a probe worker which SIGKILLs it.
    node = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.getcwd()!r})
        from tests.test_jail import ProbeWorker
        w = ProbeWorker({DEFAULT_MEMORY_MB})
        w.start()
        w.wait_ready()
        print(w.probe("import os, signal; os.kill(os.getppid(), signal.SIGKILL)"), flush=True)
        w.kill()
    """)
    out = subprocess.run([sys.executable, "-c", node], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.startswith("PermissionError"), (out.returncode, out.stdout, out.stderr)


def test_no_limit_can_be_raised(worker):
    proc = psutil.Process(worker.proc.pid)
    before = proc.rlimit(psutil.RLIMIT_CPU)
    for code in ("import resource as r; s, h = r.getrlimit(r.RLIMIT_CPU); r.setrlimit(r.RLIMIT_CPU, (h, h))",
                 "import resource as r; r.prlimit(0, r.RLIMIT_CPU, (r.RLIM_INFINITY, r.RLIM_INFINITY))",
                 "import resource as r; s, h = r.getrlimit(r.RLIMIT_AS); r.setrlimit(r.RLIMIT_AS, (h, h))"):
        reason = worker.probe(code)
        assert reason.startswith(("PermissionError", "ValueError: not allowed")), (code, reason)  # EPERM, as Python says it
    assert proc.rlimit(psutil.RLIMIT_CPU) == before
    assert before[0] != psutil.RLIM_INFINITY  # the parent set this job's budget from outside


def test_no_view_of_the_parent(worker):
    for what in ("environ", "cmdline", "maps", "status"):
        reason = worker.probe(f"import os; result = open(f'/proc/{{os.getppid()}}/{what}').read()")
        assert reason.startswith("PermissionError"), (what, reason)
    assert worker.probe("import os; result = os.listdir('/proc')").startswith("PermissionError")


def test_no_ptrace(worker):
    # A sacrificial target, not the test runner: an attach that worked would stop it.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        reason = worker.probe(f"""
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            result = (libc.ptrace(16, {other.pid}, 0, 0), ctypes.get_errno())  # PTRACE_ATTACH""")
        assert reason == "ok: (-1, 1)", reason  # EPERM
        assert psutil.Process(other.pid).status() != psutil.STATUS_TRACING_STOP
    finally:
        kill(other)


@pytest.mark.skipif(os.getuid() != 0, reason="root's powers: only a worker running as root has them")
def test_a_root_worker_cannot_use_roots_powers(worker):
    # Each asks for what is already so (no change) should the jail ever fail; refused, it is EPERM.
    for code in (("import fcntl, struct, engine.sandbox.jail as m; f = open(m.__file__); fd = f.fileno(); "
                  "flags = fcntl.ioctl(fd, 0x80086601, struct.pack('l', 0)); fcntl.ioctl(fd, 0x40086602, flags)"),
                 "import os; os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))",
                 "import os; os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0))",
                 ("import socket, ctypes; libc = ctypes.CDLL(None, use_errno=True); name = socket.gethostname().encode(); "
                  "assert libc.sethostname(name, len(name)) == -1; raise OSError(ctypes.get_errno(), 'sethostname')")):
        reason = worker.probe(code)
        assert reason.startswith("PermissionError"), (code, reason)


def test_the_worker_has_none_of_the_nodes_environment(monkeypatch):
    monkeypatch.setenv("SAPO_TEST_TOKEN", "s3cret")
    w = ProbeWorker(DEFAULT_MEMORY_MB)
    w.start()
    try:
        reason = w.probe("import os; result = sorted(os.environ)")
    finally:
        w.kill()
    assert reason.startswith("ok: ")
    names = set(ast.literal_eval(reason.removeprefix("ok: ")))
    assert "SAPO_TEST_TOKEN" not in names and "HOME" not in names and "PYTHONHASHSEED" in names


def _groups() -> list[Job]:
    """Every dataset a node may score: its presets', those it accepts from peers, the surveyed ones."""
    datasets = sorted(set(SAFE_SCORERS) | set(ANY_TASK_CAPS) | set(PAPER_TASKS) | set(EASY_CONFIGS))
    qs = [q for d in datasets for q in QuestionStream((TaskEntry(d),), "d" * 32, 0, []).draw(2)]
    qs += QuestionStream(build_mix("easy"), "c" * 32, 0, []).draw(12)  # with the easy preset's settings
    return [Job(q.spec, [q.answer, "0", "x**2 + C", None]) for q in qs]


def _unjailed(jobs: list[Job]) -> list[Result]:
    """The same jobs scored by run_job in a plain process with the workers' hash seed (polynomial questions
    depend on it) and no jail."""
    code = ("import sys, msgspec; from engine.sandbox.workers import Job, run_job; "
            "jobs = msgspec.json.decode(sys.stdin.buffer.read(), type=list[Job]); "
            "results = [run_job(j) for j in jobs]; "
            "sys.stdout.buffer.write(b'\\n' + msgspec.json.encode(results))")  # a scorer may print: the last line
    out = subprocess.run([sys.executable, "-c", code], input=msgspec.json.encode(jobs), capture_output=True,
                         env=hashseed.env(), timeout=300, check=True)
    return msgspec.json.decode(out.stdout.splitlines()[-1], type=list[Result])


def test_honest_scoring_in_the_jail_gives_the_scores_it_gives_outside():
    jobs = _groups()
    with Sandbox(workers=2, timeout_s=10.0) as sb:
        assert sb.wait_ready() and sb.unjailed == []
        jailed = sb.run(jobs)
    for job, r, free in zip(jobs, jailed, _unjailed(jobs)):
        assert r.ok and (r.scores, r.key) == (free.scores, free.key), job.spec.dataset
    assert sum(r.scores[0] == 1.0 for r in jailed) > len(jobs) // 2  # not a comparison of zeros


def test_without_landlock_or_libseccomp_the_worker_says_so_and_still_scores(tmp_path, caplog):
    # A kernel without Landlock and a system without libseccomp, as a worker would find them.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys, landlockpy\nlandlockpy.abi_version = lambda: 0\nsys.modules['pyseccomp'] = None\n")

    class Bare(_Worker):
        def environment(self) -> dict[str, str]:
            env = super().environment()
            return {**env, "PYTHONPATH": os.pathsep.join([str(tmp_path), *env.get("PYTHONPATH", "").split(os.pathsep)])}

    q = QuestionStream((TaskEntry("basic_arithmetic"),), "b" * 32, 0, []).draw(1)[0]
    w = Bare(DEFAULT_MEMORY_MB)
    w.start()
    try:
        with caplog.at_level("WARNING", logger="engine.sandbox.workers"):
            r = w.call(Job(q.spec, [q.answer, "nope"]), 10.0)
    finally:
        w.kill()
    assert r.ok and r.scores == [1.0, 0.0]
    assert [why.split(":")[0] for why in w.unjailed] == ["seccomp", "landlock"]
    assert "jail unavailable: landlock: the kernel has no Landlock" in caplog.text


def test_the_readable_paths_are_code_only(tmp_path, monkeypatch):
    home = os.path.expanduser("~")
    monkeypatch.chdir(tmp_path)  # as a node started from its data dir
    monkeypatch.setattr(sys, "path", [str(tmp_path), "/", home, *sys.path])
    paths = read_only_paths()
    assert str(tmp_path) not in paths and "/" not in paths and home not in paths
    assert any(os.path.exists(os.path.join(p, "reasoning_gym")) for p in paths)


NORMAL_USER_PROBE = """
import os, socket, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jail
print("unjailed", jail.lock_down([os.path.dirname(os.__file__), os.path.dirname(os.path.abspath(__file__))]))
for name, attempt in (("read", lambda: open("/etc/passwd").read()),  # world-readable: only the jail stops it
                      ("write", lambda: open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "x"), "w")),
                      ("tcp", lambda: socket.create_connection(("127.0.0.1", 9), timeout=1)),
                      ("fork", os.fork), ("spawn", lambda: subprocess.run(["true"])),
                      ("signal", lambda: os.kill(os.getppid(), 0)),
                      ("parent", lambda: open(f"/proc/{os.getppid()}/cmdline").read())):
    try:
        attempt()
        print(name, "done")
    except PermissionError:
        print(name, "denied")
"""


def test_the_jail_holds_for_a_normal_user_too():
    # The tests run as root here; the same jail.py, landlockpy and pyseccomp, run as 'nobody' by the
    # system's Python (the project's may sit in a home directory another user cannot enter).
    import pwd
    import shutil
    import tempfile
    from pathlib import Path

    import landlockpy
    import pyseccomp

    from engine.sandbox import jail

    python = shutil.which("python3", path="/usr/bin:/bin")
    try:
        nobody = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        nobody = None
    if os.getuid() != 0 or nobody is None or python is None:
        pytest.skip("needs root, a 'nobody' user and /usr/bin/python3")
    where = Path(tempfile.mkdtemp(prefix="sapo-jail-"))  # not under pytest's folders: those are root's alone
    try:
        for module in (jail, pyseccomp):
            shutil.copy(module.__file__, where)
        shutil.copytree(os.path.dirname(landlockpy.__file__), where / "landlockpy")
        (where / "probe.py").write_text(NORMAL_USER_PROBE)
        subprocess.run(["chmod", "-R", "a+rX", str(where)], check=True)
        out = subprocess.run([python, str(where / "probe.py")], user=nobody, capture_output=True, text=True,
                             timeout=60, cwd="/", check=False)
        if out.returncode != 0 and "SyntaxError" in out.stderr:
            pytest.skip(f"{python} is too old for landlockpy")
        assert out.stdout.splitlines() == ["unjailed []", "read denied", "write denied", "tcp denied", "fork denied",
                                           "spawn denied", "signal denied", "parent denied"], (out.stdout, out.stderr)
        assert not (where / "x").exists()
    finally:
        shutil.rmtree(where)


def test_with_a_thread_already_running_seccomp_still_reaches_every_thread():
    code = textwrap.dedent("""
        import socket, threading, time
        from engine.sandbox.jail import lock_down, read_only_paths
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        print(lock_down(read_only_paths()))
        out = []
        def connect():
            try:
                socket.socket()
                out.append("socket made")
            except PermissionError:
                out.append("socket refused")
        t = threading.Thread(target=connect); t.start(); t.join()
        print(out[0])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    lines = out.stdout.splitlines()
    assert lines[-1] == "socket refused", (out.stdout, out.stderr)
    import landlockpy

    assert lines[-2] == ("[]" if landlockpy.abi_version() >= 8 else
                         f"['landlock: 2 threads running, and ABI {landlockpy.abi_version()} binds only the calling one (needs 8)']")
