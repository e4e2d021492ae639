"""``python -m spade_rl`` is the ``spade-rl`` command."""

from spade_rl.cli import app

app(prog_name="spade-rl")
