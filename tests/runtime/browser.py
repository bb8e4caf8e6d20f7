"""A headless Chromium driven over the DevTools protocol, for tests of the pages optrace
writes (``report --html``, ``plan --graph x.html``).

No new dependency: Chromium's ``--remote-debugging-pipe`` speaks the protocol as JSON
messages ended by a NUL byte on file descriptors 3 (to the browser) and 4 (from it), so
a pipe pair and :mod:`json` are the whole client (a websocket client would be a test
extra, and a WebDriver one a second program to install). Debian's package is
``chromium``; ``.ci/run`` installs it in CI, and the tests skip where it is absent.

Flags: root (CI containers) needs ``--no-sandbox``; the network is closed, so every
background service that would call home is off, and each browser gets a fresh profile.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe",
]
STDERR: int | None = subprocess.DEVNULL
TIMEOUT = 60.0  # seconds for one protocol answer (a shared CI machine starts it slowly)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class BrowserError(RuntimeError):
    pass


def _high(fd: int) -> int:
    """``fd`` moved to a number >= 10 (close-on-exec), so that placing the child's ends on
    3 and 4 can never overwrite one with the other."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Page:
    """One tab: load a file, read what the console said, evaluate, take a screenshot."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.call(method, params, self.session)

    def load(self, path: Path, width: int = 1280, height: int = 900) -> None:
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", url=path.resolve().as_uri())
        self.browser.wait_for("Page.loadEventFired", self.session)

    def errors(self) -> list[str]:
        """Everything the page reported as an error: uncaught exceptions, console.error
        and console.assert, and the browser's own log errors (a resource that failed)."""
        found = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                found.append(f"{details.get('text', 'exception')}: "
                             f"{details.get('exception', {}).get('description', '')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(json.dumps(params.get("args", []))[:500])
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(str(params["entry"].get("text")))
        return found

    def evaluate(self, expression: str, await_promise: bool = False) -> Any:
        answer = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=await_promise)
        if "exceptionDetails" in answer:
            raise BrowserError(f"evaluation failed: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def screenshot(self, max_height: int = 6000) -> bytes:
        """The whole page (up to ``max_height`` CSS pixels) as PNG bytes."""
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], max_height),
                "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", clip=clip,
                         captureBeyondViewport=True)["data"]
        return base64.b64decode(data)

    def drawn_fraction(self, png: bytes) -> float:
        """Share of the screenshot's pixels that differ from its top-left pixel (the
        page's background), counted by the browser itself: it decodes the PNG onto a
        canvas, so no image library is needed here."""
        url = "data:image/png;base64," + base64.b64encode(png).decode()
        return float(self.evaluate(
            "new Promise((done, fail) => { const img = new Image();"
            " img.onerror = () => fail(new Error('screenshot does not decode'));"
            " img.onload = () => { const c = document.createElement('canvas');"
            " c.width = img.width; c.height = img.height; const g = c.getContext('2d');"
            " g.drawImage(img, 0, 0); const p = g.getImageData(0, 0, c.width, c.height).data;"
            " let other = 0; for (let i = 0; i < p.length; i += 4) {"
            " if (p[i] !== p[0] || p[i + 1] !== p[1] || p[i + 2] !== p[2]) other++; }"
            " done(other / (c.width * c.height)); }; img.src = " + json.dumps(url) + "; })",
            await_promise=True,
        ))


class Browser:
    """``with Browser() as browser: page = browser.new_page()``."""

    def __init__(self, executable: str) -> None:
        self.events: list[dict[str, Any]] = []
        self._next_id = 0
        self._buffer = b""
        self._profile = tempfile.mkdtemp(prefix="optrace-chromium-")
        to_browser_read, self._write = (_high(fd) for fd in os.pipe())
        self._read, from_browser_write = (_high(fd) for fd in os.pipe())

        # bash (dash takes one-digit descriptors only) puts the pipe ends on 3 and 4 and
        # closes the high numbers before it becomes Chromium: no preexec_fn, which is
        # unsafe in a process with threads.
        place = f'exec "$0" "$@" 3<&{to_browser_read} 4>&{from_browser_write} ' \
                f'{to_browser_read}<&- {from_browser_write}>&-'
        self.process = subprocess.Popen(
            ["/bin/bash", "-c", place, executable, *FLAGS, f"--user-data-dir={self._profile}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=STDERR,
            pass_fds=(to_browser_read, from_browser_write),
        )
        os.close(to_browser_read)
        os.close(from_browser_write)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (BrowserError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def new_page(self) -> Page:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        return Page(self, session)

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = TIMEOUT) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        data = memoryview(json.dumps(message).encode() + b"\0")
        while data:
            data = data[os.write(self._write, data):]
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_for(self, method: str, session: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        seen = len(self.events)
        for event in self.events[:seen]:
            if event.get("method") == method and event.get("sessionId") == session:
                return event
        while True:
            event = self._receive(deadline)
            self.events.append(event)
            if event.get("method") == method and event.get("sessionId") == session:
                return event

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise BrowserError("no answer from chromium in time")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise BrowserError(f"chromium ended (exit status {self.process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        parsed: dict[str, Any] = json.loads(message)
        return parsed
