"""``spade-rl design --out RUN_DIR [--n N] [--model M | --from-jsonl FILE] ...``: design environments with a
policy (or read a designer's outputs), validate them in the sandbox, and archive them with verdicts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import typer
from rich.table import Table

from spade_rl.cli.common import console, fail, yes
from spade_rl.sandbox import Sandbox, SandboxConfig, SandboxUnavailable


def design(
    out: Path = typer.Option(..., "--out", "-o", help="The run directory (created; its archive is reused)."),
    n: int = typer.Option(4, "--n", min=1, help="How many environments to propose."),
    model: str | None = typer.Option(
        None, "--model", "-m", help="Model name or path (default: SmolLM2-135M)."
    ),
    from_jsonl: Path | None = typer.Option(
        None, "--from-jsonl", help="Read designer outputs ({'text': ...} per line) instead of generating."
    ),
    corpus: list[str] = typer.Option(
        ["builtin"], "--corpus", help="Corpus source(s): builtin, FILE.jsonl, ..."
    ),
    setting: str = typer.Option("games", "--setting", help="games or tool_use."),
    hint_mode: str = typer.Option("inline", "--hint-mode", help="inline or separate."),
    form: str = typer.Option("module", "--form", help="module (a whole environment) or question (the kit)."),
    warmup: int = typer.Option(
        0,
        "--warmup",
        min=0,
        help="Warm the designer up on N synthetic designs first (question form; cached).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of every sampling step."),
    iteration: int = typer.Option(1, "--iteration", help="The iteration number recorded in the archive."),
    max_new_tokens: int = typer.Option(1024, "--max-new-tokens", min=16),
) -> None:
    """Design N environments with a policy, validate them in the sandbox, and archive them with verdicts."""
    import random

    from spade_rl.archive import Archive
    from spade_rl.corpus import Corpus, CorpusConfig, CorpusError
    from spade_rl.designer.phase import DesignPhaseConfig, design_environments
    from spade_rl.designer.prompts import PromptConfig
    from spade_rl.designer.warmup import WarmupError, warm_up
    from spade_rl.loop.config import load_config
    from spade_rl.loop.pool import seed_reference_environments
    from spade_rl.policy import FakePolicy, PolicyConfig, PolicyError, make_policy

    try:
        # The question form with the run's prompt settings: the warm-up of `spade-rl run` is reused.
        run_defaults = load_config(processes=1)  # `spade-rl run`'s own: the CPU profile
        prompt = run_defaults.design.prompt if form == "question" else PromptConfig()
        config = DesignPhaseConfig(
            n=n, setting=setting, hint_mode=hint_mode, max_new_tokens=max_new_tokens, form=form, prompt=prompt
        )
        # the run's warm-up settings (its memory ones too), this many designs
        warmup_config = dataclasses.replace(run_defaults.warmup, designs=warmup)
        documents = Corpus.from_config(CorpusConfig(sources=tuple(corpus)))
    except (ValueError, CorpusError) as exc:
        raise fail(str(exc)) from None
    if from_jsonl is not None:
        policy = FakePolicy(_read_designer_outputs(from_jsonl, n))
    else:
        try:
            policy = make_policy(PolicyConfig(model=model, seed=seed))
        except (PolicyError, ValueError, OSError) as exc:
            raise fail(f"cannot load the model: {exc}") from None
        try:
            with console.status(f"warming the designer up on {warmup} synthetic designs (cached)"):
                warm_up(policy, warmup_config, config, documents)
        except WarmupError as exc:
            raise fail(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    try:
        with Sandbox(SandboxConfig()) as sandbox, Archive(out / "archive.sqlite") as archive:
            seed_reference_environments(archive, sandbox, config.validation)
            with console.status(f"designing {n} environments"):
                outcomes = design_environments(policy, documents, archive, sandbox, config, rng, iteration)
    except SandboxUnavailable as exc:
        raise fail(str(exc)) from None
    table = Table(title=f"designed {n} environments into {out / 'archive.sqlite'}")
    for column in ("env", "skill", "document", "verdict", "reason", "message"):
        table.add_column(column, overflow="fold")
    for o in outcomes:
        message = (o.report.message if o.report else o.parsed.message)[:120]
        table.add_row(str(o.env_id), o.skill, o.document_id, yes(o.valid), o.reason, message)
    console.print(table)
    console.print(f"valid: {sum(o.valid for o in outcomes)} of {len(outcomes)}")


def _read_designer_outputs(path: Path, n: int) -> list[str]:
    """Designer outputs from JSONL: one object per line with a "text" field (or a bare JSON string)."""
    texts = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {path}: {exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise fail(f"{path}:{number} is not JSON: {exc}") from None
        text = item.get("text") if isinstance(item, dict) else item
        if not isinstance(text, str):
            raise fail(f'{path}:{number} needs a "text" string field (or a JSON string)')
        texts.append(text)
    if len(texts) < n:
        raise fail(f"{path} holds {len(texts)} designer outputs; --n asks for {n}")
    return texts
