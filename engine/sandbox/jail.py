"""The jail a scoring worker locks itself into once it has imported what it needs (Linux).

Two kernel mechanisms, both unprivileged, both kept by every process the worker could start:

- **Landlock** (``landlockpy``): every file-system right is handled, and only reading files and
  listing directories is granted, beneath the Python installation, the import path and the
  engine's own packages. Nothing can be written, truncated, removed, renamed, linked or created
  anywhere, and nothing else can be opened (not the user's files, not ``/proc``, not ``/dev``).
  TCP bind and connect are handled with no port granted. Scoped (ABI 6): no signal to, and no
  abstract unix socket of, any process outside the worker's own domain. Landlock also stops a
  sandboxed process from ptracing one outside its domain, which is what ``/proc/<pid>/environ``
  needs. It binds root too.
- **seccomp** (``pyseccomp``, ctypes over libseccomp): refuses, with EPERM, what Landlock does not
  cover: creating sockets of any family, new processes (fork, vfork, clone without CLONE_THREAD,
  execve; clone3 answers ENOSYS so that glibc's threads fall back to clone), signals to any pid but
  the worker's own, changing resource limits, ptrace and reading other processes' memory, file
  metadata changes (chmod, chown, times, xattrs: Landlock leaves them open), SysV and POSIX IPC,
  io_uring (it can open and connect behind seccomp's back), key rings, and the privileged calls
  that matter when the node runs as root (mount, modules, reboot, clock, namespaces, BPF,
  open_by_handle_at, real-time priorities, memory locking, the immutable flag). A root worker keeps
  its capabilities: these refusals are what stand between them and the machine. Syscall numbers newer than libseccomp's table are refused with ENOSYS, so
  a new kernel call cannot slip past a deny list written for an older one.

``lock_down`` returns what it could not apply (an empty list: the whole jail holds); the worker
reports that to its parent, which logs "jail unavailable: <why>". Without Landlock or
libseccomp the worker still runs behind its resource limits and the parent's timeout.

Hand-written here: the list of paths and the syscall policy; the mechanisms are the libraries'.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterable
from typing import Any

# Where a worker may read (and list): the code it runs. Shared libraries that an extension
# module loads lazily live in the system's library directories, hence those too.
SYSTEM_LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache")

# seccomp: each refused with EPERM, whatever its arguments.
DENIED = (
    # network: no socket of any family (AF_UNIX too: a path socket would reach the user's daemons)
    "socket", "socketpair",
    # new processes and new programs
    "fork", "vfork", "execve", "execveat",
    # signals by other routes than kill/tgkill
    "tkill", "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
    # limits, other processes, privilege
    "setrlimit", "prlimit64", "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise",
    "kcmp", "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid",
    "setfsgid", "setgroups", "capset", "personality", "unshare", "setns",
    # file metadata (Landlock does not cover it); path truncation (Landlock covers it from ABI 3)
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr",
    "removexattr", "lremovexattr", "fremovexattr", "truncate",
    # IPC with other processes outside the file system
    "shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
    "semctl", "semtimedop", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
    "mq_getsetattr",
    # calls that work around path checks or seccomp itself
    "io_uring_setup", "io_uring_enter", "io_uring_register", "open_by_handle_at",
    "name_to_handle_at", "fanotify_init", "userfaultfd", "bpf", "perf_event_open",
    "keyctl", "add_key", "request_key",
    # root's powers
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsmount",
    "fspick", "mount_setattr", "reboot", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "swapon", "swapoff", "settimeofday", "clock_settime",
    "clock_adjtime", "adjtimex", "sethostname", "setdomainname", "iopl", "ioperm", "acct",
    "quotactl", "quotactl_fd", "syslog", "vhangup", "mknod", "mknodat",
    # root could take the machine's CPUs (a real-time priority) or pin memory
    "sched_setscheduler", "sched_setparam", "sched_setattr", "setpriority", "ioprio_set",
    "mlock", "mlock2", "mlockall",
)
# ioctl requests refused: a root worker could mark a file it can read immutable (chattr +i)
DENIED_IOCTLS = (0x40086602, 0x401C5820)  # FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR
CLONE_THREAD = 0x00010000
NEWER_SYSCALLS = 256  # numbers past libseccomp's table refused with ENOSYS


def read_only_paths() -> list[str]:
    """The directories (and files) a worker may read: Python, its import path, our packages, system libraries."""
    import wire

    cwd = os.getcwd()
    engine = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, *SYSTEM_LIBRARY_DIRS}
    paths |= {p for p in sys.path if p and os.path.abspath(p) != cwd}  # cwd may be a data dir: not code
    paths |= {engine, os.path.dirname(os.path.abspath(wire.__file__ or ""))}
    # A PYTHONPATH of "~" or "/" would open everything below: such an entry is left out (what the
    # worker imports from it is loaded already).
    home = os.path.expanduser("~")
    paths = {os.path.abspath(p) for p in paths if p}
    return sorted(p for p in paths if os.path.exists(p) and not _above(p, home))


def _above(path: str, home: str) -> bool:
    """``path`` is ``home`` or one of its ancestors."""
    return os.path.commonpath([path, home]) == path


def lock_down(read_only: Iterable[str]) -> list[str]:
    """Jail this process for good; what could not be applied, one line each ([] when the whole jail holds).

    Call it from the only thread: Landlock before ABI 8 binds the calling thread and its
    children, not threads already running (then only seccomp is applied, which reaches them all).
    """
    if not sys.platform.startswith("linux"):
        return [f"{sys.platform}: no Landlock or seccomp, only resource limits and the parent's timeout"]
    problems = []
    threads = _threads()
    try:
        import pyseccomp  # noqa: F401 - finds libseccomp with ldconfig: a new process, so before either wall
    except (ImportError, OSError, RuntimeError) as exc:  # RuntimeError: libseccomp is not installed
        problems.append(f"seccomp: {exc}")
        seccomp = False
    else:
        seccomp = True
    problems += _landlock(read_only, threads)
    if seccomp:
        try:
            _seccomp()
        except (OSError, ValueError) as exc:
            problems.append(f"seccomp: {exc}")
    return problems


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def _landlock(read_only: Iterable[str], threads: int) -> list[str]:
    try:
        import landlockpy
    except ImportError as exc:
        return [f"landlock: {exc}"]
    abi = landlockpy.abi_version()
    if abi < 1:
        return ["landlock: the kernel has no Landlock (too old, or not enabled at boot)"]
    if threads > 1 and abi < 8:
        return [f"landlock: {threads} threads running, and ABI {abi} binds only the calling one (needs 8)"]
    problems = []
    if abi < 4:
        problems.append(f"landlock: ABI {abi} cannot refuse TCP (needs 4; seccomp still refuses sockets)")
    if abi < 6:
        problems.append(f"landlock: ABI {abi} cannot scope signals (needs 6; seccomp still refuses them)")
    read = landlockpy.AccessFS.READ_FILE | landlockpy.AccessFS.READ_DIR
    try:
        with landlockpy.Ruleset(handled_fs=landlockpy.fs_for_abi(abi), handled_net=landlockpy.net_for_abi(abi),
                                scoped=landlockpy.scope_for_abi(abi)) as ruleset:
            for path in read_only:
                # a file takes file rights only; READ_DIR on it would be refused (EINVAL)
                ruleset.allow_path(path, read if os.path.isdir(path) else landlockpy.AccessFS.READ_FILE)
            # sets no_new_privs first; TSYNC: every thread (ABI 8)
            ruleset.restrict(landlockpy.RestrictFlag.TSYNC if threads > 1 else landlockpy.RestrictFlag.NONE)
    except OSError as exc:  # landlockpy.LandlockError is one
        return [f"landlock: {exc}"]
    return problems


def _seccomp() -> None:
    """Default allow; the calls above refused."""
    import pyseccomp as sc

    eperm = sc.ERRNO(errno.EPERM)
    f = sc.SyscallFilter(sc.ALLOW)
    f.set_attr(sc.Attr.CTL_TSYNC, 1)  # every thread, should one exist by now
    f.set_attr(sc.Attr.CTL_NNP, 1)
    for name in DENIED:
        if sc.resolve_syscall(sc.system_arch(), name) >= 0:  # names this libseccomp does not know are < 0
            f.add_rule(eperm, name)
    me = os.getpid()
    f.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))  # a thread, never a process
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")  # flags behind a pointer; glibc falls back to clone
    for request in DENIED_IOCTLS:
        f.add_rule(eperm, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):  # to itself only
        f.add_rule(eperm, name, sc.Arg(0, sc.NE, me))
    last = _last_known(sc)
    for nr in range(last + 1, last + 1 + NEWER_SYSCALLS):
        f.add_rule(sc.ERRNO(errno.ENOSYS), nr)
    f.load()


def _last_known(sc: Any) -> int:
    """The highest syscall number libseccomp knows for this machine."""
    arch, last = sc.system_arch(), 0
    for nr in range(1024):
        try:
            sc.resolve_syscall(arch, nr)
            last = nr
        except ValueError:
            pass
    return last
