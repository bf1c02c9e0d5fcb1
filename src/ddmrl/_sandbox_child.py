"""Child side of :mod:`ddmrl.sandbox`: run one Python program under an audit-hook guard and report how it ended.

Started by the parent as ``python -I -B _sandbox_child.py CTL_DIR GUARD`` with the scratch directory as the
working directory and resource limits already set. Standard library only: ``ddmrl`` is deliberately not
importable here (``-I`` ignores PYTHONPATH and the user site).

``CTL_DIR/program.py`` holds the program; ``CTL_DIR/result.json`` receives one JSON object
``{"status": "ok"|"failed"|"memory"|"error", "exception": name|None, "message": str}``. The result file is
opened before the guard is installed and written only after the program ran to its end (or raised), so a
program that leaves early (``os._exit(0)``, a signal) leaves no result and the parent treats it as an error.

The guard (``GUARD == "1"``) is a PEP 578 audit hook. It refuses: process creation (fork, exec, spawn,
posix_spawn, system, subprocess), signals to other processes, every ``socket.*`` event, changing resource
limits, importing ``ctypes``/``_ctypes``/``_posixsubprocess``/``cffi``, and any write, create, delete, rename,
chmod or link whose resolved path lies outside the scratch directory (``/dev/null`` excepted). Refusals raise
``PermissionError("sandbox: ...")`` inside the program. Audit hooks are not a security boundary (PEP 578 says
so): they stop accidents and ordinary runaway code, not code written to escape.
"""

import builtins
import json
import os
import sys
import traceback

_BLOCKED = {
    "os.fork",
    "os.forkpty",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.system",
    "subprocess.Popen",
    "pty.spawn",
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
    "resource.setrlimit",
    "resource.prlimit",
    "ctypes.dlopen",
    "ctypes.dlsym",
    "ctypes.cdata",
    "ctypes.call_function",
}
_BLOCKED_IMPORTS = {"ctypes", "_ctypes", "_posixsubprocess", "cffi", "_cffi_backend"}
#: event -> (indices of path arguments, index of the dir_fd argument or None)
_PATH_EVENTS = {
    "os.remove": ((0,), 1),
    "os.rmdir": ((0,), 1),
    "os.mkdir": ((0,), 2),
    "os.rename": ((0, 1), 2),
    "os.link": ((0, 1), 2),
    "os.symlink": ((1,), 2),
    "os.truncate": ((0,), None),
    "os.chmod": ((0,), 2),
    "os.chown": ((0,), 3),
    "os.utime": ((0,), 3),
    "os.setxattr": ((0,), None),
    "os.removexattr": ((0,), None),
    "shutil.rmtree": ((0,), None),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _install_guard(scratch: str) -> None:
    realpath, join, isabs, fsdecode, readlink = (
        os.path.realpath,
        os.path.join,
        os.path.isabs,
        os.fsdecode,
        os.readlink,
    )
    prefix = scratch.rstrip(os.sep) + os.sep

    def inside(path, dir_fd=None) -> bool:
        if isinstance(path, int):
            return True  # an already-open descriptor
        path = fsdecode(path)
        if dir_fd not in (None, -1) and not isabs(path):
            path = join(readlink(f"/proc/self/fd/{dir_fd}"), path)
        full = realpath(path)
        return full == scratch or full.startswith(prefix) or full == "/dev/null"

    def hook(event, args):
        if event in _BLOCKED or event.startswith("socket."):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args[0] in _BLOCKED_IMPORTS:
            raise PermissionError(f"sandbox: importing {args[0]} is not allowed")
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writing and not inside(path):
                raise PermissionError(f"sandbox: writing {path!r} outside the scratch directory")
        elif event in _PATH_EVENTS:
            positions, fd_at = _PATH_EVENTS[event]
            dir_fd = args[fd_at] if fd_at is not None and fd_at < len(args) else None
            for i in positions:
                if not inside(args[i], dir_fd):
                    raise PermissionError(f"sandbox: {event} on {args[i]!r} outside the scratch directory")

    sys.addaudithook(hook)


def _describe(exc: BaseException) -> str:
    try:
        return str(exc)[:1000]
    except Exception:
        return "<unprintable>"


def main() -> None:
    ctl, guard = sys.argv[1], sys.argv[2] == "1"
    scratch = os.path.realpath(os.getcwd())
    result_fd = os.open(os.path.join(ctl, "result.json"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(os.path.join(ctl, "program.py"), encoding="utf-8") as f:
        source = f.read()

    def finish(status: str, exc: BaseException | None = None) -> None:
        if exc is not None:
            try:
                traceback.print_exception(exc, file=sys.stderr)
            except BaseException:
                pass
        record = {"status": status, "exception": type(exc).__name__ if exc else None}
        record["message"] = _describe(exc) if exc else ""
        os.write(result_fd, json.dumps(record).encode())
        os.close(result_fd)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(0 if status == "ok" else 1)  # skip the program's atexit handlers and finalizers

    sys.argv = ["<solution>"]
    if guard:
        _install_guard(scratch)
    try:
        code = compile(source, "<solution>", "exec")
    except BaseException as e:  # SyntaxError, ValueError (NUL bytes), MemoryError
        finish("memory" if isinstance(e, MemoryError) else "error", e)
    try:
        exec(code, {"__name__": "__main__", "__builtins__": builtins})
    except AssertionError as e:
        finish("failed", e)
    except MemoryError as e:
        finish("memory", e)
    except SystemExit as e:
        finish("error", RuntimeError(f"the program called exit({e.code!r}) before its end"))
    except BaseException as e:
        finish("error", e)
    finish("ok")


if __name__ == "__main__":
    main()
