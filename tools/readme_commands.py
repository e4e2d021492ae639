"""Print the README's two opening commands, as the README writes them: what CI runs (.ci/run).

    python3 tools/readme_commands.py            # both, one a line: the install-and-run, then the tests
    python3 tools/readme_commands.py install    # the first: install, then a short self-play run
    python3 tools/readme_commands.py test       # the second: install what the tests need, run them

The commands are the lines of the README's first fenced ``bash`` block. CI runs each with bash as it
stands, so that a newcomer's two commands and CI's cannot drift apart: a step that CI needs and the
README lacks fails CI instead of hiding behind it. Anything else that CI does is what the README says it
adds (its Develop section). The block must hold exactly two commands, the first ending in ``spade-rl
run`` and the second running pytest; otherwise this exits with status 2 and says what it found.
Standard library only: CI runs it before anything is installed.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
NAMES = ("install", "test")


class ReadmeError(ValueError):
    """The README's opening block is not the two commands CI runs."""


def opening_block(text: str) -> list[str]:
    """The non-blank lines of the first fenced ``bash`` block of ``text``."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        if re.fullmatch(r"```bash\s*", line):
            end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("```")), None)
            if end is None:
                raise ReadmeError(f"the README's first bash block (line {start + 1}) is never closed")
            return [body for body in lines[start + 1 : end] if body.strip()]
    raise ReadmeError("the README has no ```bash block")


def last_command(command: str) -> list[str]:
    """The words of the last simple command of ``command`` (after its last ``&&``), comment dropped."""
    try:
        tokens = shlex.split(command, comments=True)
    except ValueError as exc:
        raise ReadmeError(f"the README's command {command!r} does not parse: {exc}") from None
    cut = max((i for i, token in enumerate(tokens) if token == "&&"), default=-1)
    return tokens[cut + 1 :]


def readme_commands(text: str) -> dict[str, str]:
    """``{"install": first line, "test": second line}`` of the README's opening block, checked."""
    found = opening_block(text)
    if len(found) != 2:
        raise ReadmeError(f"the README's opening block holds {len(found)} commands, not two: {found}")
    install, test = found
    if last_command(install) != ["spade-rl", "run"]:
        raise ReadmeError(f"the README's first command does not end in `spade-rl run`: {install!r}")
    if last_command(test)[:3] != ["python", "-m", "pytest"]:
        raise ReadmeError(f"the README's second command does not end in `python -m pytest`: {test!r}")
    return dict(zip(NAMES, found, strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", nargs="?", choices=NAMES, help="one command (default: both, one a line)")
    args = parser.parse_args(argv)
    try:
        commands = readme_commands(README.read_text(encoding="utf-8"))
    except ReadmeError as exc:
        print(f"readme_commands: {exc}", file=sys.stderr)
        return 2
    print(*([commands[args.which]] if args.which else commands.values()), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
