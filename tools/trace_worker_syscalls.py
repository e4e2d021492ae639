"""List the system calls sandbox workers make once their seccomp filter is loaded.

Maintainers' tool for ``spade_rl/sandbox/seccomp_filter.py``'s allow-list: every worker the given
tests start runs under ``strace -f`` (the pool's command prefix, as bubblewrap's is), and the calls
each worker made after it loaded its filter are counted, with those the current filter refuses. Run
it as root (``strace`` must be installed)::

    python tools/trace_worker_syscalls.py tests/design tests/evaluate tests/sandbox/test_pool.py

The attack suite is a poor source (its environments make forbidden calls on purpose): trace the
reference environments, the designs and the evaluation suites, and read the refusals it prints.
"""

from __future__ import annotations

import collections
import pathlib
import re
import shutil
import sys
import tempfile

import pytest

from spade_rl.sandbox import pool as pool_module
from spade_rl.sandbox import seccomp_filter

LINE = re.compile(r"^(?:\[pid\s+\d+\]\s+)?(\w+)\((.*)")
LOADED = re.compile(r"^seccomp\(SECCOMP_SET_MODE_FILTER, [^,]*, \{len=")


def main(argv: list[str]) -> int:
    strace = shutil.which("strace")
    if strace is None:
        print("strace is not installed (apt-get install strace)", file=sys.stderr)
        return 2
    out = pathlib.Path(tempfile.mkdtemp(prefix="spade-strace-"))
    prefix = [strace, "-f", "-qq", "-ff", "-o", str(out / "w"), "--"]
    # The prefix replaces bubblewrap's: the worker then skips its parent check (its parent is strace).
    pool_module.SandboxPool._bwrap_prefix = lambda self: list(prefix)
    code = pytest.main(["-q", "-p", "no:cacheprovider", *argv])
    counts: collections.Counter[str] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()
    workers = 0
    examples: dict[str, str] = {}
    for path in out.iterdir():
        after = False
        for line in path.read_text(errors="replace").splitlines():
            if not after:
                after = bool(LOADED.match(line))
                workers += after
                continue
            match = LINE.match(line)
            if match:
                counts[match.group(1)] += 1
                examples.setdefault(match.group(1), line[:160])
                if "EPERM" in line.rsplit("=", 1)[-1] or "ENOSYS" in line.rsplit("=", 1)[-1]:
                    refused[match.group(1)] += 1
    allowed = {*seccomp_filter.ALLOWED, "open", "openat", "fcntl", "ioctl", "prlimit64", "kill", "tgkill"}
    print(f"\n{workers} filtered workers traced (pytest exit {code}); calls after the filter loaded:")
    for name, count in counts.most_common():
        mark = "" if name in allowed else "   <- not in the allow-list"
        print(f"  {name:24} {count:9}  refused {refused[name]}{mark}")
        if mark or refused[name]:
            print(f"      e.g. {examples[name]}")
    shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
