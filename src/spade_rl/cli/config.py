"""``spade-rl config [--config FILE] [OVERRIDES...] [--explain]``: the configuration a run would use, resolved
and checked as ``spade-rl run`` resolves it, printed without running anything.

    spade-rl config                                              # spade-rl run's own: the CPU profile
    spade-rl config -c configs/spade-paper-games.toml | jq .loop  # JSON, tables as in the TOML
    spade-rl config -c configs/qwen3-gpu.toml --explain          # each value and where it came from

JSON holds what a run's ``config.json`` holds (the derived keys left out: they follow their sources);
``--explain`` prints one line per key, ``key = value  # source``, where the source is ``override``,
``file PATH``, ``profile NAME`` or ``default`` (the component's own).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from spade_rl.cli.common import fail


def config(
    config: Path | None = typer.Option(None, "--config", "-c", help="A TOML file (see configs/)."),
    overrides: list[str] = typer.Argument(
        None, help="Overrides such as loop.iterations=5 or policy.model='path'."
    ),
    explain: bool = typer.Option(
        False, "--explain", help="One line per key with where its value came from, instead of JSON."
    ),
) -> None:
    """Print the resolved configuration (JSON), or with --explain where each value came from."""
    from spade_rl.loop.config import ConfigError, resolve_config, saved_data

    try:
        resolved = resolve_config(config, list(overrides or []))
    except ConfigError as exc:
        raise fail(str(exc)) from None
    data = saved_data(resolved.config)
    if not explain:
        typer.echo(json.dumps(data, indent=2))
        return
    decided = _decided_at_run(resolved.config)
    lines = []
    for key, value in _leaves(data, resolved.config):
        source = resolved.source(key)
        if key in decided and decided[key] != value:
            source += f"; the run uses {json.dumps(decided[key])} ({decided['why']})"
        lines.append((key, json.dumps(value), source))
    width = min(64, max(len(f"{key} = {value}") for key, value, _ in lines))  # a long list goes past it
    for key, value, source in lines:
        typer.echo(f"{f'{key} = {value}':<{width}}  # {source}")


def _decided_at_run(config: Any) -> dict[str, Any]:
    """The values a run decides from others when it starts, keyed as in ``--explain``: ``train.old_logprobs =
    "auto"`` becomes "sampling" or "recompute" (with ``train.tis_cap``'s default cap) by who samples."""
    update = config.update_config
    sampler = (
        "the trainer samples itself"
        if config.policy.backend == "transformers"
        else (f"policy.backend {config.policy.backend!r} samples for the trainer")
    )
    return {"train.old_logprobs": update.old_logprobs, "train.tis_cap": update.tis_cap, "why": sampler}


def _leaves(data: dict, config: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) of every setting in ``data``, following the tables of nested configurations
    (``config`` holds their dataclasses); a plain table such as ``rollout.action_prefix`` is one value."""
    from dataclasses import is_dataclass

    leaves = []
    for key, value in data.items():
        inner = getattr(config, key, None)
        if isinstance(value, dict) and is_dataclass(inner):
            leaves += _leaves(value, inner, f"{prefix}{key}.")
        else:
            leaves.append((prefix + key, value))
    return leaves
