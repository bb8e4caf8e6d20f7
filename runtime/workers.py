"""Forked workers: a function run in a child process, its result sent back pickled.

collect splits its rank files into consecutive runs and gives each run but the first to
a forked child (threads do not pay: the Python between numpy calls holds the GIL, and
measured on 2 cores two threads were no faster than one). A fork shares everything the
parent imported and built (numpy, the point map) at no cost, which a spawned process
would import again (about half a typical collect).

fork() is only used where it is safe: on Linux, and when no other thread runs (a lock a
thread holds at the moment of the fork stays held forever in the child). The child never
returns into the caller's code: it sends its result and leaves with ``os._exit``, so no
buffered output, ``atexit`` handler or ``finally`` of the parent runs twice.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn


def can_fork() -> bool:
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    threading = sys.modules.get("threading")  # not imported: no thread can be running
    return threading is None or threading.active_count() == 1


class Worker:
    """``work()`` in a forked child; :meth:`result` returns what it returned or raises
    what it raised (an exception that cannot be pickled comes back as a RuntimeError
    with its traceback text)."""

    def __init__(self, work: Callable[[], Any]) -> None:
        read_fd, write_fd = os.pipe()
        try:
            pid = os.fork()
        except BaseException:
            os.close(read_fd)
            os.close(write_fd)
            raise
        if pid == 0:
            os.close(read_fd)
            _child(work, write_fd)
        os.close(write_fd)
        self.pid = pid
        self._fd = read_fd

    def result(self) -> Any:
        with os.fdopen(self._fd, "rb") as stream:  # read before waiting: a full pipe blocks the child
            self._fd = -1
            data = stream.read()
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        if not data:
            raise RuntimeError(f"a collect worker ended without a result ({_describe(status)})")
        kind, value = pickle.loads(data)
        if kind == "error":
            raise value
        return value

    def cancel(self) -> None:
        """Stop the child if it still runs (the parent failed or was interrupted)."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = 0
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _child(work: Callable[[], Any], fd: int) -> NoReturn:
    code = 1
    try:  # whatever happens (a second Ctrl-C included), never back into the parent's code
        try:
            payload: tuple[str, Any] = ("ok", work())
            code = 0
        except BaseException as exc:  # everything goes back to the parent
            payload = ("error", _portable(exc))
        try:
            data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # the payload itself does not pickle
            code = 1
            data = pickle.dumps(("error", RuntimeError(f"a collect worker's result cannot be sent: {exc}")))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os._exit(code)


def _portable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # e.g. an exception class whose __init__ wants more
        import traceback

        text = "".join(traceback.format_exception(exc))
        return RuntimeError(f"in a collect worker: {type(exc).__name__}: {exc}\n{text}")


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


class Ticks:
    """Children report each finished rank with one byte on a pipe; the parent counts
    them for its progress bar without ever blocking on it mid-run."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)

    def tick(self) -> None:  # in a child
        os.write(self.write_fd, b".")

    def child_done(self) -> None:
        """In a child, before it sends its result: the parent waits for the end of the
        ticks before it reads results, and a result bigger than a pipe's buffer would
        otherwise wait for the parent while the parent waits for the ticks to end."""
        os.close(self.write_fd)
        self.write_fd = -1

    def parent_side(self) -> None:
        """After the last fork: only the children hold the write end, so the pipe ends
        (EOF) when the last of them exits."""
        os.close(self.write_fd)
        self.write_fd = -1

    def drain(self, block: bool = False) -> int | None:
        """Ticks waiting now (or, with ``block``, the next ones); None once every child
        has closed the pipe."""
        os.set_blocking(self.read_fd, block)
        try:
            data = os.read(self.read_fd, 4096)
        except BlockingIOError:
            return 0
        return len(data) if data else None

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            if fd >= 0:
                os.close(fd)
        self.read_fd = self.write_fd = -1


class Channel:
    """Small pickled messages, one way, between the parent and one forked child."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()

    def send(self, message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(len(data).to_bytes(8, "little") + data)
        while view:
            view = view[os.write(self.write_fd, view) :]

    def receive(self) -> Any:
        """The next message; EOFError when the other side closed first (it failed)."""
        size = int.from_bytes(self._exactly(8), "little")
        return pickle.loads(self._exactly(size))

    def _exactly(self, size: int) -> bytes:
        parts: list[bytes] = []
        while size:
            part = os.read(self.read_fd, size)
            if not part:
                raise EOFError("the other process ended")
            parts.append(part)
            size -= len(part)
        return b"".join(parts)

    def keep_reading_end(self) -> None:
        self._close("write_fd")

    def keep_writing_end(self) -> None:
        self._close("read_fd")

    def close(self) -> None:
        self._close("read_fd")
        self._close("write_fd")

    def _close(self, end: str) -> None:
        fd = getattr(self, end)
        if fd >= 0:
            os.close(fd)
            setattr(self, end, -1)
