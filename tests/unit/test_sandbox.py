"""The sandbox contains runaway programs and reports them as failed runs, not crashes (short limits, fast)."""

import os
import socket
import time
from pathlib import Path

import pytest

from ddmrl.sandbox import STATUSES, SandboxLimits, network_isolation_available, run_python

FAST = SandboxLimits(timeout_s=1.5, memory_mb=256)


def _gone(pid: int, within_s: float = 3.0) -> bool:
    """The process no longer exists (or is a zombie waiting for init to reap it)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def listener():
    """A TCP server on 127.0.0.1 that the test process itself can reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


def test_limits_are_validated():
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxLimits(timeout_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxLimits(memory_mb=0)


def test_ok_failed_and_error_statuses():
    ok = run_python("def f(x):\n    return x + 1\nassert f(1) == 2\nprint('hello')", FAST)
    assert (ok.passed, ok.status, ok.stdout.strip(), ok.returncode) == (True, "ok", "hello", 0)
    failed = run_python("assert 1 + 1 == 3, 'arithmetic'", FAST)
    assert (failed.passed, failed.status) == (False, "failed")
    assert failed.detail == "AssertionError: arithmetic" and "AssertionError" in failed.stderr
    syntax = run_python("def f(:\n    pass", FAST)
    assert (syntax.passed, syntax.status) == (False, "error") and syntax.detail.startswith("SyntaxError")
    raised = run_python("raise KeyError('k')", FAST)
    assert (raised.status, raised.detail) == ("error", "KeyError: 'k'")
    assert {ok.status, failed.status, syntax.status} <= set(STATUSES)


def test_leaving_before_the_end_is_not_a_pass():
    early_exit = run_python("import sys\nsys.exit(0)\nassert False", FAST)
    assert (early_exit.passed, early_exit.status) == (False, "error") and "exit(0)" in early_exit.detail
    hard_exit = run_python("import os\nos._exit(0)\nassert False", FAST)
    assert (hard_exit.passed, hard_exit.status, hard_exit.returncode) == (False, "error", 0)
    assert "before reaching the end" in hard_exit.detail


def test_infinite_loop_times_out_on_the_wall_clock():
    result = run_python("while True:\n    pass", SandboxLimits(timeout_s=1.0, cpu_s=30))
    assert (result.passed, result.status) == (False, "timeout")
    assert "wall-clock" in result.detail and 1.0 <= result.seconds < 3.0


def test_cpu_limit_stops_a_busy_loop():
    result = run_python("while True:\n    pass", SandboxLimits(timeout_s=10.0, cpu_s=1))
    assert (result.passed, result.status) == (False, "timeout")
    assert "CPU-time limit" in result.detail and result.seconds < 5.0


def test_memory_bomb_is_a_memory_failure():
    grow = run_python("chunks = []\nwhile True:\n    chunks.append(' ' * 10**7)", FAST)
    assert (grow.passed, grow.status) == (False, "memory")
    one_shot = run_python("x = bytearray(8 * 2**30)", FAST)
    assert (one_shot.passed, one_shot.status) == (False, "memory")


def test_fork_bomb_is_contained():
    # the guard refuses the first fork, so the bomb never starts; the machine is not touched
    result = run_python("import os\nwhile True:\n    os.fork()", SandboxLimits(timeout_s=1.0))
    assert (result.passed, result.status) == (False, "error")
    assert "os.fork is not allowed" in result.detail
    for code in (
        "import subprocess\nsubprocess.run(['true'])",
        "import os\nos.system('true')",
        "import multiprocessing\nmultiprocessing.Process(target=print).start()",
        "import ctypes",
    ):
        assert not run_python(code, FAST).passed, code


@pytest.mark.skipif(os.geteuid() == 0, reason="the kernel does not enforce RLIMIT_NPROC for root")
def test_process_limit_without_the_guard():
    # unguarded, only RLIMIT_NPROC stands between the program and a fork bomb: it must fail at once
    code = "import os\nfor _ in range(10000):\n    if os.fork() == 0:\n        os._exit(0)"
    result = run_python(code, SandboxLimits(timeout_s=2.0, guard=False, max_processes=1))
    assert result.status == "error" and "BlockingIOError" in result.detail


def test_whole_process_group_is_killed_on_timeout():
    # unguarded, the program starts a long-lived child, prints its pid, then hangs; both must die
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "while True:\n    pass"
    )
    result = run_python(code, SandboxLimits(timeout_s=1.5, guard=False, max_processes=10_000))
    assert result.status == "timeout"
    assert _gone(int(result.stdout.split()[0]))


def test_network_is_blocked(listener):
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {listener}), timeout=1).close()"
    guarded = run_python(code, FAST)
    assert (guarded.passed, guarded.status) == (False, "error")
    assert guarded.network in ("namespace", "guard")
    hostname = run_python("import socket\nsocket.getaddrinfo('example.com', 80)", FAST)
    assert not hostname.passed
    control = run_python(code, SandboxLimits(timeout_s=1.5, guard=False, network_namespace=False))
    assert (control.status, control.network) == ("ok", "none")  # the server is reachable without isolation


@pytest.mark.skipif(not network_isolation_available(), reason="this kernel refuses unshare(CLONE_NEWNET)")
def test_network_namespace_alone_blocks_connections(listener):
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {listener}), timeout=1).close()"
    result = run_python(code, SandboxLimits(timeout_s=1.5, guard=False))
    assert (result.status, result.network) == ("error", "namespace")
    assert "OSError" in result.detail or "ConnectionRefusedError" in result.detail


def test_files_stay_in_the_scratch_directory(tmp_path):
    outside = tmp_path / "escaped.txt"
    result = run_python(f"open({str(outside)!r}, 'w').write('x')", FAST)
    assert (result.passed, result.status) == (False, "error") and "outside the scratch directory" in result.detail
    assert not outside.exists()
    for code in (
        "open('../escaped.txt', 'w').write('x')",
        f"import os\nos.remove({str(tmp_path)!r})",
        f"import shutil\nshutil.rmtree({str(tmp_path)!r})",
        f"import os\nos.mkdir({str(tmp_path / 'd')!r})",
    ):
        assert not run_python(code, FAST).passed, code
    assert tmp_path.is_dir() and list(tmp_path.iterdir()) == []


def test_scratch_directory_is_the_cwd_and_is_removed():
    code = (
        "import os, shutil, tempfile\n"
        "print(os.getcwd(), flush=True)\n"
        "open('out.txt', 'w').write('x')\n"
        "os.mkdir('d')\nopen('d/f', 'w').write('y')\nshutil.rmtree('d')\n"
        "with tempfile.NamedTemporaryFile('w') as f:\n    f.write('z')\n"
        "assert open('out.txt').read() == 'x'\n"
        "assert os.environ['HOME'] == os.getcwd() and 'http_proxy' not in os.environ"
    )
    result = run_python(code, FAST)
    assert result.status == "ok", result.detail
    scratch = Path(result.stdout.split()[0])
    assert scratch.name == "work" and not scratch.exists() and not scratch.parent.exists()


def test_file_size_limit():
    limits = SandboxLimits(timeout_s=5, max_file_mb=1)
    to_file = run_python("open('big', 'w').write('x' * 3 * 2**20)", limits)
    assert (to_file.status, to_file.detail) == ("error", "OSError: [Errno 27] File too large")
    to_stdout = run_python("import sys\nsys.stdout.write('x' * 3 * 2**20)\nsys.stdout.flush()", limits)
    assert to_stdout.status == "error" and "File too large" in to_stdout.detail


def test_docstring_examples():
    import doctest

    from ddmrl import sandbox

    assert doctest.testmod(sandbox).attempted == 2 and doctest.testmod(sandbox).failed == 0


def test_output_is_capped_and_tailed():
    result = run_python("print('x' * 100_000)\nprint('END')", SandboxLimits(timeout_s=5, tail_chars=50))
    assert result.status == "ok" and len(result.stdout) <= 50 and result.stdout.rstrip().endswith("END")
