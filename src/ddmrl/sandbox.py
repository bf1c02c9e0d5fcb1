"""Run model-generated Python (MBPP solutions plus their asserts) in a separate, limited process.

One call of :func:`run_python` = one fresh interpreter (``python -I -B``) that runs the program as
``__main__`` (as MaskGRPO's ``python3 -c code+assert`` does) and reports a :class:`SandboxResult`. The layers,
and what each one really guarantees:

* **Time.** A wall-clock limit enforced by the parent, and ``RLIMIT_CPU`` (SIGXCPU at the soft limit, SIGKILL
  one second later). On either, the *whole process group* is killed with SIGKILL: the child is started with
  ``start_new_session=True``, so everything it forks stays in a group the parent can kill.
* **Memory.** ``RLIMIT_AS`` (address space, per process), so allocations fail with ``MemoryError`` instead of
  swapping the machine. ``RLIMIT_FSIZE`` caps every file the program writes (stdout and stderr included),
  ``RLIMIT_CORE`` = 0, ``RLIMIT_NOFILE`` caps open descriptors.
* **Processes.** ``RLIMIT_NPROC`` = ``max_processes``. The kernel counts it per *user* and does **not**
  enforce it for root (uid 0, or CAP_SYS_RESOURCE/CAP_SYS_ADMIN); the guard below is then what stops a fork
  bomb, with the process-group kill as the backstop.
* **Network.** Where the kernel allows it, the child is moved into a new, empty network namespace in a
  ``preexec_fn`` (``unshare(CLONE_NEWNET)``, plus ``CLONE_NEWUSER`` when not root): it then has only a loopback
  interface that is down, so no connection can leave the process, whatever the code does. Where ``unshare``
  is refused (seccomp in some containers), only the guard's ``socket.*`` ban applies.
  :attr:`SandboxResult.network` says which one ran. The environment is also reduced to a few variables
  (no proxy settings).
* **Files.** The working directory, ``HOME`` and ``TMPDIR`` are a fresh scratch directory, removed afterwards.
  The guard refuses writes, deletes, renames and links whose resolved path is outside it. The filesystem is
  otherwise visible with the caller's permissions: reads are not restricted.
* **Guard.** A PEP 578 audit hook in the child (see ``ddmrl/_sandbox_child.py``): no fork/exec/spawn/system/
  subprocess, no signals to other processes, no sockets, no ``ctypes``, no raising of resource limits, no writes
  outside the scratch directory. Audit hooks are *not* a security boundary; they contain accidents and ordinary
  runaway code. For adversarial code use a container or VM around this.

Linux only (``resource``, ``os.waitid``, ``/proc``). The limits are set in a ``preexec_fn``; Python documents
that as unsafe when the calling process has other threads (a rare deadlock between fork and exec), so call
:func:`run_python` from a process that is not running other Python threads, or from a worker process.

Statuses: ``ok`` (ran to the end), ``failed`` (an ``AssertionError``: a test failed), ``timeout`` (wall or CPU
limit), ``memory`` (``MemoryError``), ``error`` (anything else: syntax error, other exception, a refused
operation, ``exit()`` before the end, death by a signal, or a program that ended without reaching its end).
"""

from __future__ import annotations

import functools
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["STATUSES", "SandboxLimits", "SandboxResult", "network_isolation_available", "run_python"]

STATUSES = ("ok", "failed", "timeout", "memory", "error")
_CHILD = Path(__file__).with_name("_sandbox_child.py")
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_MIB = 1024 * 1024


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandboxed run.

    Attributes:
        timeout_s: wall-clock limit in seconds (5-10 s suits MBPP; MaskGRPO's code reward uses 5 s).
        cpu_s: ``RLIMIT_CPU`` in whole seconds; ``None`` = ``ceil(timeout_s)``.
        memory_mb: ``RLIMIT_AS`` in MiB (address space, so it must leave room for the interpreter, ~30 MiB).
        max_processes: ``RLIMIT_NPROC`` (per user; not enforced for root).
        max_file_mb: ``RLIMIT_FSIZE`` in MiB (also bounds captured stdout/stderr).
        max_open_files: ``RLIMIT_NOFILE``.
        guard: install the audit-hook guard in the child.
        network_namespace: move the child into an empty network namespace when the kernel allows it.
        tail_chars: how much of the end of stdout/stderr the result keeps.
    """

    timeout_s: float = 10.0
    cpu_s: int | None = None
    memory_mb: int = 1024
    max_processes: int = 1
    max_file_mb: int = 16
    max_open_files: int = 256
    guard: bool = True
    network_namespace: bool = True
    tail_chars: int = 2000

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"SandboxLimits.timeout_s must be > 0, got {self.timeout_s}")
        for name in ("memory_mb", "max_file_mb", "max_open_files"):
            if getattr(self, name) < 1:
                raise ValueError(f"SandboxLimits.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_processes < 0 or (self.cpu_s is not None and self.cpu_s < 1):
            raise ValueError("SandboxLimits: max_processes must be >= 0 and cpu_s >= 1")


@dataclass(frozen=True)
class SandboxResult:
    """How one sandboxed run ended.

    Attributes:
        passed: ``status == "ok"`` (for an MBPP program: every assert held).
        status: one of :data:`STATUSES`.
        detail: one line: the exception (``AssertionError: ...``), the limit hit, or the signal.
        stdout, stderr: the last ``tail_chars`` characters of each.
        seconds: wall time of the child.
        returncode: the child's exit status (negative: killed by that signal); ``None`` if it never started.
        network: ``"namespace"`` (own empty network namespace), ``"guard"`` (socket ban only) or ``"none"``.
    """

    passed: bool
    status: str
    detail: str
    stdout: str
    stderr: str
    seconds: float
    returncode: int | None
    network: str


@functools.cache
def _libc_unshare():
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc.unshare
    except (OSError, AttributeError, ImportError):
        return None


def _unshare_flags() -> int:
    return _CLONE_NEWNET if os.geteuid() == 0 else _CLONE_NEWUSER | _CLONE_NEWNET


def _enter_empty_netns() -> None:
    """In the forked child: leave the parent's network namespace (raises OSError if the kernel refuses)."""
    unshare = _libc_unshare()
    if unshare is None or unshare(_unshare_flags()) != 0:
        raise OSError("unshare(CLONE_NEWNET) refused")


@functools.cache
def network_isolation_available() -> bool:
    """Whether this process may start children in a new network namespace (probed once, ~20 ms)."""
    if not sys.platform.startswith("linux") or _libc_unshare() is None:
        return False
    try:
        probe = subprocess.run(
            [sys.executable, "-I", "-S", "-c", ""],
            preexec_fn=_enter_empty_netns,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _set_limits(limits: SandboxLimits, netns: bool):
    cpu = limits.cpu_s if limits.cpu_s is not None else max(1, math.ceil(limits.timeout_s))
    wanted = [
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_AS, limits.memory_mb * _MIB, limits.memory_mb * _MIB),
        (resource.RLIMIT_FSIZE, limits.max_file_mb * _MIB, limits.max_file_mb * _MIB),
        (resource.RLIMIT_NOFILE, limits.max_open_files, limits.max_open_files),
        (resource.RLIMIT_NPROC, limits.max_processes, limits.max_processes),
    ]
    settings = []  # computed in the parent: never above a hard limit that is already lower
    for which, soft, hard in wanted:
        current = resource.getrlimit(which)[1]
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        settings.append((which, (soft, hard)))

    def preexec() -> None:  # runs in the child between fork and exec
        if netns:
            _enter_empty_netns()
        for which, pair in settings:
            resource.setrlimit(which, pair)

    return preexec


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_exit(pid: int, timeout_s: float) -> bool:
    """Wait until ``pid`` has exited, without reaping it (its pid keeps naming the process group); False on
    timeout."""
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while True:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.02)


def _tail(path: Path, chars: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4 * chars))
            return f.read().decode("utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


def _read_result(path: Path) -> dict | None:
    import json

    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("status") in STATUSES else None


def _classify(timed_out: bool, returncode: int, record: dict | None, stderr: str, limits: SandboxLimits):
    if timed_out:
        return "timeout", f"wall-clock limit of {limits.timeout_s:g} s reached; process group killed"
    if record is not None:
        exc = record.get("exception")
        return record["status"], (f"{exc}: {record.get('message', '')}".strip() if exc else "")
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return "timeout", f"CPU-time limit reached (killed by {signal.Signals(-returncode).name})"
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr:
        return "memory", "out of memory before the program could report"
    if returncode < 0:
        return "error", f"killed by {signal.Signals(-returncode).name}"
    return "error", f"exited with code {returncode} before reaching the end of the program"


def run_python(code: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run ``code`` as a Python program in a fresh, limited interpreter and report how it ended.

    The interpreter is this one (``sys.executable``), isolated (``-I``: no PYTHONPATH, no user site, no
    script directory on ``sys.path``), so the program sees the standard library and this environment's
    site-packages, never ``ddmrl``'s source tree.

    >>> run_python("assert sum([1, 2]) == 3", SandboxLimits(timeout_s=5)).status
    'ok'
    >>> run_python("assert 1 + 1 == 3", SandboxLimits(timeout_s=5)).status
    'failed'
    """
    limits = limits or SandboxLimits()
    netns = limits.network_namespace and network_isolation_available()
    network = "namespace" if netns else ("guard" if limits.guard else "none")
    root = Path(tempfile.mkdtemp(prefix="ddmrl-sandbox-"))
    try:
        ctl, work = root / "ctl", root / "work"
        ctl.mkdir()
        work.mkdir()
        (ctl / "program.py").write_text(code, encoding="utf-8")
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(work),
            "TMPDIR": str(work),
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0",
            "PYTHONIOENCODING": "utf-8",
            "no_proxy": "*",
            "NO_PROXY": "*",
        }
        command = [sys.executable, "-I", "-B", str(_CHILD), str(ctl), "1" if limits.guard else "0"]
        start = time.monotonic()
        with open(ctl / "stdout", "wb") as out, open(ctl / "stderr", "wb") as err:
            try:
                proc = subprocess.Popen(
                    command,
                    cwd=work,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    preexec_fn=_set_limits(limits, netns),
                    close_fds=True,
                )
            except (OSError, subprocess.SubprocessError) as e:
                detail = f"could not start the sandboxed interpreter: {e}"
                return SandboxResult(False, "error", detail, "", "", 0.0, None, network)
            try:
                timed_out = not _wait_exit(proc.pid, limits.timeout_s)
            finally:
                _kill_group(proc.pid)  # the leader is not reaped yet, so its pid still names the group
                proc.wait()
        seconds = time.monotonic() - start
        stdout, stderr = _tail(ctl / "stdout", limits.tail_chars), _tail(ctl / "stderr", limits.tail_chars)
        record = _read_result(ctl / "result.json")
        status, detail = _classify(timed_out, proc.returncode, record, stderr, limits)
        detail = " ".join(detail.split())[:500]
        return SandboxResult(status == "ok", status, detail, stdout, stderr, seconds, proc.returncode, network)
    finally:
        shutil.rmtree(root, ignore_errors=True)
