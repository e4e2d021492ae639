"""Open a report in headless Chromium and read back the page's own self-check.

    check = check_page(Path("runs/demo/report/index.html"))
    print(check.passed, check.problems, [f["name"] for f in check.figures])

Chromium loads the file with no network (``--dump-dom`` after the load event, background networking
off, every host name unresolvable) and prints the final DOM. The page's inline script has written
into ``#page-check`` the script errors, Content-Security-Policy violations and failed loads it saw,
and each figure's decoded size; this module parses that record. Chromium is the Debian package
``chromium`` (any of ``chromium``, ``chromium-browser``, ``google-chrome`` on the PATH will do).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class BrowserError(RuntimeError):
    """Chromium is missing, failed, or timed out."""


@dataclass
class BrowserCheck:
    passed: bool
    problems: list[str]
    figures: list[dict] = field(default_factory=list)  # {"name", "width", "height"} as decoded
    dom: str = ""  # the page's DOM after load, as Chromium serialised it


def find_chromium() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


class _PageCheck(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.state: str | None = None
        self.result: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "html":
            self.state = values.get("data-page-check")
        if values.get("id") == "page-check":
            self.result = values.get("data-result")


def check_page(path: Path, *, chromium: str | None = None, timeout_s: float = 90.0) -> BrowserCheck:
    """Load ``path`` in headless Chromium; ``BrowserError`` if Chromium is missing or fails."""
    path = Path(path).resolve()
    if not path.is_file():
        raise BrowserError(f"no page at {path}")
    binary = chromium or find_chromium()
    if binary is None:
        raise BrowserError(f"no Chromium found (looked for {', '.join(BROWSERS)}); apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="spade-report-chromium-") as profile:
        command = [
            binary,
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND",  # nothing outside may be reached
            f"--user-data-dir={profile}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            path.as_uri(),
        ]
        if os.geteuid() == 0:
            command.insert(1, "--no-sandbox")  # Chromium refuses to start as root with its own sandbox
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            dom, errors = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise BrowserError(f"Chromium did not finish loading {path} within {timeout_s:g} s") from None
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    if process.returncode != 0 or "<html" not in dom:
        raise BrowserError(f"Chromium failed on {path} (exit {process.returncode}): {errors[-2000:]}")
    parser = _PageCheck()
    parser.feed(dom)
    if parser.result is None or parser.state is None:
        return BrowserCheck(
            False, ["the page's self-check did not run (script blocked or page not loaded)"], dom=dom
        )
    try:
        record = json.loads(parser.result)
    except json.JSONDecodeError:
        return BrowserCheck(False, [f"unreadable self-check record: {parser.result[:200]!r}"], dom=dom)
    problems = [str(p) for p in record.get("problems", [])]
    return BrowserCheck(
        parser.state == "passed" and not problems, problems, list(record.get("figures", [])), dom
    )
