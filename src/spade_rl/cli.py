"""The ``spade-rl`` command line.

spade-rl doctor [--json]                 which isolation layers this machine has; a live self-check
spade-rl envs list                       the reference environments
spade-rl envs show NAME                  print a reference environment's source
spade-rl envs validate FILE|NAME... [--json]   run the validation battery in the sandbox
spade-rl report RUN_DIR [--check]         a self-contained HTML report of a run, with PNG figures
spade-rl eval [--model M] [--suite S ...] [--limit N] [--out FILE]   held-out evaluation (JSON result)
spade-rl eval --compare A.json B.json     side-by-side comparison with significance tests
spade-rl experiment FILE.toml [--out DIR] [--check]   arms (baselines, ablations) compared on held-out suites
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from spade_rl.design.validate import ValidationSettings
from spade_rl.envs import reference
from spade_rl.sandbox import SandboxConfig, SandboxPool, SandboxUnavailable

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="SPADE: self-play in executable environments."
)
envs_app = typer.Typer(no_args_is_help=True, help="Reference environments and validation.")
app.add_typer(envs_app, name="envs")


def _console() -> Console:
    """Rich's own width on a terminal; 160 columns when the output goes to a file or a pipe (rich would
    wrap tables at 80 columns there, one cell over several lines), unless COLUMNS says otherwise."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=160)


console = _console()


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)  # plain: no wrapping, so messages can be read and grepped
    return typer.Exit(2)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


@app.command()
def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    skip_check: bool = typer.Option(False, "--no-check", help="Only list the layers; run no probe."),
) -> None:
    """Show which sandbox layers are available and active, then run hostile probes through the sandbox."""
    from spade_rl.sandbox.doctor import layer_table, sandbox_user_access, self_check

    config = SandboxConfig()
    rows, error = layer_table(config)
    access = sandbox_user_access(config)
    probes = []
    if not error and not skip_check:
        try:
            probes = self_check(config)
        except SandboxUnavailable as exc:
            error = str(exc)
    healthy = not error and all(p.stopped for p in probes)
    if as_json:
        print(
            json.dumps(
                {
                    "python": sys.version.split()[0],
                    "layers": [r.__dict__ for r in rows],
                    "probes": [p.__dict__ for p in probes],
                    "sandbox_user_cannot_read": access,
                    "error": error,
                    "healthy": healthy,
                },
                indent=2,
            )
        )
    else:
        table = Table(title="sandbox layers")
        for column in ("layer", "mode", "available", "active", "detail"):
            table.add_column(column)
        for r in rows:
            table.add_row(r.layer, r.mode, _yes(r.available), _yes(r.active), r.detail)
        console.print(table)
        if probes:
            checks = Table(title="self-check: hostile environments")
            for column in ("attack", "stopped", "what happened"):
                checks.add_column(column)
            for p in probes:
                checks.add_row(p.name, _yes(p.stopped), p.detail)
            console.print(checks)
        for why in access:
            console.print(
                f"[yellow]workers drop to uid {config.unprivileged_uid}, which cannot read this Python's "
                f"modules:[/] {why}. Environments can import only what the workers preload."
            )
        if error:
            console.print(f"[bold red]sandbox unavailable:[/] {error}")
        else:
            console.print(
                "[bold green]sandbox healthy[/]" if healthy else "[bold red]an attack was not stopped[/]"
            )
    if not healthy:
        raise typer.Exit(1)


def _yes(flag: bool) -> str:
    return "[green]yes[/]" if flag else "[red]no[/]"


def _archive_path(run_dir: Path) -> Path:
    path = run_dir / "archive.sqlite" if run_dir.is_dir() else run_dir
    if not path.exists():
        raise _fail(f"no archive at {path}: give a run directory (holding archive.sqlite) or an archive file")
    return path


def _open_archive(run_dir: Path, readonly: bool = True):
    from spade_rl.archive import Archive, ArchiveError

    try:
        return Archive(_archive_path(run_dir), readonly=readonly)
    except ArchiveError as exc:
        raise _fail(str(exc)) from None


ARCHIVE_OPTION = typer.Option(None, "--archive", "-a", help="A run directory or archive.sqlite file.")


@envs_app.command("list")
def envs_list(
    archive: Path | None = ARCHIVE_OPTION,
    valid_only: bool = typer.Option(False, "--valid-only", help="Only valid environments."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List the reference environments, or the environments of an archive."""
    if archive is None:
        rows = [
            {"name": n, "setting": reference.SETTINGS[n], "description": reference.DESCRIPTIONS[n]}
            for n in reference.NAMES
        ]
        title = "reference environments"
    else:
        with _open_archive(archive) as store:
            latest = store.latest_stats()
            rows = []
            for env_id in store.ids(valid=True if valid_only else None):
                record = store.get(env_id)
                stats = latest.get(env_id)
                rows.append(
                    {
                        "id": env_id,
                        "valid": record.valid,
                        "reason": record.reason,
                        "skill": record.skill,
                        "setting": record.setting,
                        "iteration": record.iteration,
                        "origin": record.origin,
                        "class": record.class_name,
                        "win_nohint": round(stats.stats.win_rate_nohint, 3) if stats else None,
                        "win_hint": round(stats.stats.win_rate_hint, 3) if stats else None,
                        "regret": round(stats.stats.regret, 3) if stats else None,
                    }
                )
        title = f"environments in {archive}"
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=title)
    for column in rows[0] if rows else ("name",):
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row.values()))
    console.print(table)


@envs_app.command("show")
def envs_show(name: str, archive: Path | None = ARCHIVE_OPTION) -> None:
    """Print a reference environment's source, or an archived environment (source, hint, statistics)."""
    if archive is None:
        try:
            print(reference.source(name))
        except (KeyError, ValueError) as exc:
            raise _fail(str(exc.args[0] if exc.args else exc)) from None
        return
    if not name.isdigit():
        raise _fail(f"with --archive, give an environment id (a number), got {name!r}")
    with _open_archive(archive) as store:
        try:
            record = store.get(int(name))
        except (KeyError, ValueError) as exc:
            raise _fail(f"no environment {name} in {archive}: {exc}") from None
        history = store.stats_history(record.env_id)
    print(
        f"# environment {record.env_id}: {record.class_name or '?'} "
        f"({'valid' if record.valid else 'invalid'}:"
        f" {record.reason}) skill={record.skill} setting={record.setting} iteration={record.iteration}"
        f" origin={record.origin} parents={list(record.parents)} document={record.document_id}"
    )
    if record.message:
        print(f"# {record.message}")
    print(f"# hint: {record.hint or '(none)'}")
    for row in history:
        st = row.stats
        print(
            f"# iteration {row.iteration}: win {st.win_rate_nohint:.2f} without hint, {st.win_rate_hint:.2f} "
            f"with; regret {st.regret:.2f}; {st.episodes_nohint}+{st.episodes_hint} episodes"
        )
    print(record.source)


@envs_app.command("export")
def envs_export(
    out: Path = typer.Argument(..., help="The JSONL file to write."),
    archive: Path = typer.Option(..., "--archive", "-a", help="A run directory or archive.sqlite file."),
    valid_only: bool = typer.Option(False, "--valid-only", help="Only valid environments."),
) -> None:
    """Export an archive's environments (with metadata and statistics) as JSONL, one per line."""
    with _open_archive(archive) as store:
        count = store.export_jsonl(out, valid_only=valid_only)
    console.print(f"wrote {count} environments to {out}")


@envs_app.command("import")
def envs_import(
    file: Path = typer.Argument(..., help="A JSONL file written by `envs export`."),
    archive: Path = typer.Option(..., "--archive", "-a", help="A run directory or archive.sqlite file."),
    skip_bad_lines: bool = typer.Option(
        False, "--skip-bad-lines", help="Skip malformed lines, reporting each."
    ),
) -> None:
    """Import environments from JSONL into an archive (created if missing); duplicates are recognised."""
    from spade_rl.archive import Archive, ArchiveError

    if not file.is_file():
        raise _fail(f"no such file: {file}")
    path = archive / "archive.sqlite" if archive.is_dir() or not archive.suffix else archive
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with Archive(path) as store:
            result = store.import_jsonl(file, on_error="skip" if skip_bad_lines else "raise")
    except ArchiveError as exc:
        raise _fail(str(exc)) from None
    console.print(
        f"imported {result.added} new environments, {result.duplicates} duplicates, "
        f"{len(result.skipped)} lines skipped into {path}"
    )


def _read_env(spec: str) -> str:
    path = Path(spec)
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise _fail(f"cannot read {spec}: {exc}") from None
    if spec in reference.NAMES:
        return reference.source(spec)
    raise _fail(f"{spec} is neither a file nor a reference environment ({', '.join(reference.NAMES)})")


@envs_app.command("validate")
def envs_validate(
    files: list[str] = typer.Argument(..., help="Environment files, or reference environment names."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of reports."),
    hint: str | None = typer.Option(
        None,
        "--hint",
        help="The design's hint: checked as the loop checks a designer's hint (its length, and that it "
        "names no answer of any seed played), for every file.",
    ),
    max_turns: int = typer.Option(
        ValidationSettings().max_turns,
        "--max-turns",
        min=1,
        help="The turn limit validation uses (the loop uses rollout.max_turns).",
    ),
) -> None:
    """Validate environments in the sandbox; exit status 1 when any is not valid."""
    from spade_rl.design.parse import check_hint
    from spade_rl.design.validate import ValidationReport, validate_source

    sources = [(spec, _read_env(spec)) for spec in files]
    settings = ValidationSettings(max_turns=max_turns)
    rules = check_hint(hint) if hint is not None else None
    if rules is not None and rules.reason != "ok":  # refused as the design phase refuses it
        reports = [(spec, ValidationReport(False, rules.reason, rules.message)) for spec, _ in sources]
    else:
        hint_text = rules.hint if rules is not None else ""
        try:
            with SandboxPool(SandboxConfig()) as pool:
                reports = [
                    (spec, validate_source(pool, source, settings, hint=hint_text))
                    for spec, source in sources
                ]
        except SandboxUnavailable as exc:
            raise _fail(str(exc)) from None
    if as_json:
        print(json.dumps([{"path": spec, **report.to_json()} for spec, report in reports], indent=2))
    else:
        table = Table(title="validation")
        for column in ("path", "valid", "reason", "seconds", "message"):
            table.add_column(column, overflow="fold")
        for spec, report in reports:
            table.add_row(
                spec, _yes(report.valid), report.reason, f"{report.seconds:.3f}", report.message[:200]
            )
        console.print(table)
    if not all(report.valid for _, report in reports):
        raise typer.Exit(1)


@app.command()
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
    from spade_rl.design.prompts import PromptConfig
    from spade_rl.loop.config import RunConfig
    from spade_rl.loop.designing import DesignPhaseConfig, design_environments, seed_reference_environments
    from spade_rl.loop.warmup import WarmupConfig, WarmupError, warm_up
    from spade_rl.policy import FakePolicy, PolicyConfig, PolicyError, make_policy

    try:
        # The question form with the run's prompt settings: the warm-up of `spade-rl run` is reused.
        prompt = RunConfig().design.prompt if form == "question" else PromptConfig()
        config = DesignPhaseConfig(
            n=n, setting=setting, hint_mode=hint_mode, max_new_tokens=max_new_tokens, form=form, prompt=prompt
        )
        warmup_config = WarmupConfig(designs=warmup)
        documents = Corpus.from_config(CorpusConfig(sources=tuple(corpus)))
    except (ValueError, CorpusError) as exc:
        raise _fail(str(exc)) from None
    if from_jsonl is not None:
        policy = FakePolicy(_read_designer_outputs(from_jsonl, n))
    else:
        try:
            policy = make_policy(PolicyConfig(model=model, seed=seed))
        except (PolicyError, ValueError, OSError) as exc:
            raise _fail(f"cannot load the model: {exc}") from None
        try:
            with console.status(f"warming the designer up on {warmup} synthetic designs (cached)"):
                warm_up(policy, warmup_config, config, documents)
        except WarmupError as exc:
            raise _fail(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    try:
        with SandboxPool(SandboxConfig()) as pool, Archive(out / "archive.sqlite") as archive:
            seed_reference_environments(archive, pool, config.validation)
            with console.status(f"designing {n} environments"):
                outcomes = design_environments(policy, documents, archive, pool, config, rng, iteration)
    except SandboxUnavailable as exc:
        raise _fail(str(exc)) from None
    table = Table(title=f"designed {n} environments into {out / 'archive.sqlite'}")
    for column in ("env", "skill", "document", "verdict", "reason", "message"):
        table.add_column(column, overflow="fold")
    for o in outcomes:
        message = (o.report.message if o.report else o.parsed.message)[:120]
        table.add_row(str(o.env_id), o.skill, o.document_id, _yes(o.valid), o.reason, message)
    console.print(table)
    console.print(f"valid: {sum(o.valid for o in outcomes)} of {len(outcomes)}")


def _read_designer_outputs(path: Path, n: int) -> list[str]:
    """Designer outputs from JSONL: one object per line with a "text" field (or a bare JSON string)."""
    texts = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(f"cannot read {path}: {exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _fail(f"{path}:{number} is not JSON: {exc}") from None
        text = item.get("text") if isinstance(item, dict) else item
        if not isinstance(text, str):
            raise _fail(f'{path}:{number} needs a "text" string field (or a JSON string)')
        texts.append(text)
    if len(texts) < n:
        raise _fail(f"{path} holds {len(texts)} designer outputs; --n asks for {n}")
    return texts


def _resolve_play_target(
    env: str, archive: Path | None, hint_text: str | None, max_turns: int
) -> tuple[str, str, str, str, dict]:
    """(source, hint, setting, label, constructor arguments) of a file, a reference name, or an archive
    id. An archive environment is played with the arguments it was validated with; any other with
    ``max_turns`` when its constructor takes it, as validation would give it."""
    from spade_rl.design.validate import constructor_kwargs, play_kwargs

    if archive is not None and env.isdigit():
        with _open_archive(archive) as store:
            try:
                record = store.get(int(env))
            except (KeyError, ValueError) as exc:
                raise _fail(f"no environment {env} in {archive}: {exc}") from None
        kwargs = play_kwargs(record.source, record.env_kwargs, max_turns)
        return record.source, hint_text or record.hint, record.setting, f"archive env {env}", kwargs
    source = _read_env(env)
    setting = reference.SETTINGS.get(env, "tool_use" if "<tool_call>" in source else "games")
    return source, hint_text or "", setting, env, constructor_kwargs(source, max_turns)


@app.command()
def play(
    env: str = typer.Argument(
        ..., help="A reference name, an environment file, or an archive id (--archive)."
    ),
    model: str | None = typer.Option(
        None, "--model", "-m", help="Model name or path (default: SmolLM2-135M)."
    ),
    human: bool = typer.Option(False, "--human", help="Play yourself: type each action."),
    episodes: int = typer.Option(1, "--episodes", "-n", min=1, help="Episodes to play (batched)."),
    hint: bool = typer.Option(False, "--hint", help="Also play with the hint and compare win rates."),
    hint_text: str | None = typer.Option(None, "--hint-text", help="The hint (default: the archive's)."),
    archive: Path | None = ARCHIVE_OPTION,
    seed: int = typer.Option(0, "--seed", help="Seed of the first episode (episode i uses seed + i)."),
    max_turns: int = typer.Option(25, "--max-turns", min=1),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", min=1),
    temperature: float = typer.Option(0.6, "--temperature", min=0.0),
) -> None:
    """Watch a model (or yourself, with --human) play an environment in the sandbox, turn by turn."""
    source, hint_value, setting, label, env_kwargs = _resolve_play_target(env, archive, hint_text, max_turns)
    if hint and not hint_value:
        raise _fail(f"--hint needs a hint: {label} has none; give one with --hint-text")
    try:
        with SandboxPool(SandboxConfig()) as pool:
            if human:
                _play_human(pool, source, env_kwargs, hint_value if hint else "", seed, max_turns)
                return
            _play_model(
                pool,
                source,
                env_kwargs,
                hint_value,
                setting,
                label,
                model,
                episodes,
                hint,
                seed,
                max_turns,
                max_new_tokens,
                temperature,
            )
    except SandboxUnavailable as exc:
        raise _fail(str(exc)) from None


def _play_model(
    pool,
    source,
    env_kwargs,
    hint_value,
    setting,
    label,
    model,
    episodes,
    hint,
    seed,
    max_turns,
    max_new_tokens,
    temperature,
) -> None:
    from spade_rl.loop.config import RunConfig
    from spade_rl.policy import PolicyConfig, PolicyError, make_policy
    from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes

    try:
        with console.status("loading the model"):
            policy = make_policy(PolicyConfig(model=model, seed=seed))
        # The forced action opening and stop strings of `spade-rl run`'s defaults: play as training plays.
        defaults = RunConfig().rollout
        config = RolloutConfig(
            max_turns=max_turns,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            action_prefix=defaults.action_prefix,
            action_stop=defaults.action_stop,
        )
    except (PolicyError, ValueError, OSError) as exc:
        raise _fail(f"cannot load the model: {exc}") from None
    arms = [False, True] if hint else [False]
    specs = [
        EpisodeSpec(
            source, seed=seed + i, hint=hint_value, use_hint=use_hint, setting=setting, env_kwargs=env_kwargs
        )
        for use_hint in arms
        for i in range(episodes)
    ]

    def watch(index: int, episode) -> None:  # the first episode is shown live, turn by turn
        if index != 0:
            return
        if not episode.turns:
            console.rule(f"{label}: episode 1 (seed {seed})")
            console.print(f"[bold]observation[/]\n{episode.messages[1]['content']}")
            return
        turn = episode.turns[-1]
        console.print(f"[bold cyan]turn {len(episode.turns)} - model[/]\n{turn.action}")
        console.print(f"[bold]observation[/] (reward {turn.reward:g})\n{turn.observation}")

    results = run_episodes(policy, pool, specs, config, seed=seed, on_turn=watch)
    first = results[0]
    console.print(f"episode 1 ended: {first.stop_reason} {first.error}, return {first.return_:g}")
    table = Table(title=f"{label}: {episodes} episode(s) per arm")
    for column in ("hint", "win rate", "mean return", "mean turns", "ended by"):
        table.add_column(column)
    for use_hint in arms:
        arm = [e for e in results if e.spec.use_hint == use_hint]
        ended = {}
        for e in arm:
            ended[e.stop_reason] = ended.get(e.stop_reason, 0) + 1
        table.add_row(
            "with" if use_hint else "without",
            f"{sum(e.won for e in arm) / len(arm):.2f}",
            f"{sum(e.return_ for e in arm) / len(arm):.2f}",
            f"{sum(len(e.turns) for e in arm) / len(arm):.1f}",
            ", ".join(f"{k} {v}" for k, v in sorted(ended.items())),
        )
    console.print(table)


def _play_human(pool, source: str, env_kwargs: dict, hint_value: str, seed: int, max_turns: int) -> None:
    from spade_rl.envs import ContractViolation, check_reset_value, check_step_value

    opened = pool.open(source, env_kwargs)
    if not opened.ok:
        raise _fail(f"the environment does not load: {opened.reason}: {opened.error}")
    handle = opened.value
    try:
        first = handle.reset(seed)
        try:
            observation, _ = check_reset_value(first.value) if first.ok else (None, None)
        except ContractViolation as exc:
            raise _fail(f"reset: {exc}") from None
        if observation is None:
            raise _fail(f"reset failed: {first.reason}: {first.error}")
        console.print(observation + (f"\n\nHint: {hint_value}" if hint_value else ""))
        for turn in range(1, max_turns + 1):
            try:
                action = typer.prompt(f"turn {turn} action", default="", show_default=False)
            except (EOFError, typer.Abort):
                console.print("stopped")
                return
            result = handle.step(action)
            if not result.ok:
                raise _fail(f"step failed: {result.reason}: {result.error}")
            try:
                step = check_step_value(result.value)
            except ContractViolation as exc:
                raise _fail(f"step: {exc}") from None
            console.print(f"{step.observation}\n(reward {step.reward:g})")
            if step.terminated or step.truncated:
                console.print("won" if step.terminated and step.reward >= 1.0 else "episode over")
                return
        console.print(f"out of turns ({max_turns})")
    finally:
        handle.close()


@app.command()
def run(
    config: Path | None = typer.Option(None, "--config", "-c", help="A TOML file (see configs/)."),
    overrides: list[str] = typer.Argument(
        None, help="Overrides such as loop.iterations=5 or policy.model='path'."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="The run directory (default: runs/<time>)."),
    resume: Path | None = typer.Option(None, "--resume", help="Continue the run in this directory."),
) -> None:
    """Self-play training: design, validate, play, reward and update, iteration after iteration."""
    import time as _time

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from spade_rl.corpus import CorpusError
    from spade_rl.loop.config import ConfigError
    from spade_rl.loop.run import open_run
    from spade_rl.policy import PolicyError

    if resume is not None and out is not None and resume != out:
        raise _fail("give either --resume RUN_DIR or --out RUN_DIR, not both")
    run_dir = resume or out or Path("runs") / _time.strftime("%Y%m%d-%H%M%S")
    from spade_rl.loop.distributed import is_follower, run_follower_from_cli

    if is_follower():  # a non-main process of `accelerate launch`: it only trains its share
        try:
            run_follower_from_cli(config, list(overrides or []), run_dir, resume is not None)
        except (ConfigError, PolicyError) as exc:
            raise _fail(str(exc)) from None
        return
    try:
        with console.status("starting: model, sandbox, archive"):
            selfplay = open_run(config, list(overrides or []), run_dir, resume is not None)
    except (ConfigError, CorpusError, PolicyError) as exc:
        raise _fail(str(exc)) from None
    except SandboxUnavailable as exc:
        raise _fail(str(exc)) from None
    total = selfplay.config.loop.iterations
    console.print(f"run directory: {run_dir}  (iterations {selfplay.next_iteration}..{total})")
    with (
        selfplay,
        Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console) as bar,
    ):
        task = bar.add_task("self-play", total=total, completed=selfplay.next_iteration - 1)
        for metrics in selfplay.iterations():
            bar.console.print(_iteration_line(metrics))
            bar.advance(task)
    console.print(f"done: {run_dir / 'metrics.jsonl'}")


def _iteration_line(m: dict) -> str:
    def fmt(key: str, spec: str = ".2f") -> str:
        value = m.get(key)
        return "-" if value is None else format(value, spec)

    return (
        f"iter {m['iteration']:>3}  valid {fmt('designer/valid_rate')}  win {fmt('agent/win_rate')}"
        f"  win+hint {fmt('agent/win_rate_hint')}  regret {fmt('regret/mean')}  band {fmt('band/fraction')}"
        f"  loss {fmt('train/loss', '.4g')}  {fmt('time/iteration_s', '.0f')} s"
    )


@app.command()
def report(
    run_dir: Path = typer.Argument(..., help="The run directory written by `spade-rl run`."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Where to write (default: RUN_DIR/report)."),
    examples: int = typer.Option(3, "--examples", min=0, help="Example environments in the filmstrip."),
    episodes: int = typer.Option(3, "--episodes", min=0, help="Sampled episodes shown."),
    check: bool = typer.Option(False, "--check", help="Open the page in headless Chromium and check it."),
) -> None:
    """Write a self-contained HTML report of a run (curves, skills, example environments, evaluation)."""
    from rich.markup import escape

    from spade_rl.report import ReportError, build_report

    try:
        with console.status("drawing the report"):
            result = build_report(run_dir, out, examples=examples, episodes=episodes)
    except (ReportError, ImportError) as exc:  # ImportError: matplotlib missing (the report extra)
        raise _fail(str(exc)) from None
    for warning in result.warnings:
        console.print(f"[yellow]note:[/] {escape(warning)}", highlight=False)
    console.print(f"report: {escape(str(result.index))}", highlight=False)
    console.print(f"figures: {escape(', '.join(p.name for p in result.figures))}", highlight=False)
    if check:
        from spade_rl.report.browser import BrowserError, check_page

        try:
            checked = check_page(result.index)
        except BrowserError as exc:
            raise _fail(str(exc)) from None
        if not checked.passed:
            problems = escape("; ".join(checked.problems))
            console.print(f"[bold red]page check failed:[/] {problems}", highlight=False)
            raise typer.Exit(1)
        console.print(f"page check: {len(checked.figures)} figures decoded in Chromium, no script errors")


@app.command("eval")
def eval_(
    model: str | None = typer.Option(
        None, "--model", "-m", help="Model name or path (default: SmolLM2-135M)."
    ),
    suites: list[str] = typer.Option(
        None, "--suite", "-s", help="A suite to run (repeat for more; default: all): reasoning_gym, bfcl, ..."
    ),
    limit: int | None = typer.Option(
        None, "--limit", "-n", min=1, help="At most N items per suite (per task or category)."
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of every selection and sampling step."),
    out: Path | None = typer.Option(None, "--out", "-o", help="The result file (default: eval-<time>.json)."),
    options: list[str] = typer.Option(
        None, "--option", help="A suite option, suite.key=value (repeatable), e.g. envs.episodes=4."
    ),
    compare_files: tuple[Path, Path] | None = typer.Option(
        None, "--compare", help="Compare two result files: --compare A.json B.json (runs nothing)."
    ),
    backend: str = typer.Option("transformers", "--backend", help="transformers, openai or vllm."),
    max_new_tokens: int = typer.Option(
        512, "--max-new-tokens", min=1, help="Per answer (the envs suite: envs.max_new_tokens per turn)."
    ),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, help="0 is greedy."),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Chats per generation call."),
) -> None:
    """Evaluate a model on held-out suites and write a JSON result; or compare two results."""
    if compare_files is not None:
        if model or suites or options or out or limit:
            raise _fail(
                "--compare reads two result files; it takes no --model, --suite, --option, --limit or --out"
            )
        _eval_compare(*compare_files)
        return
    import time as _time

    from spade_rl.evaluate.base import SUITES, EvalContext
    from spade_rl.evaluate.runner import build_suites, run_eval
    from spade_rl.evaluate.tables import categories_table, results_table
    from spade_rl.policy import DEFAULT_MODEL, PolicyConfig, PolicyError, SamplingSettings, make_policy

    names = list(suites or SUITES)
    try:
        suite_options = _parse_suite_options(options or [])
        built = build_suites(names, suite_options)
        sampling = SamplingSettings(
            max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, logprobs=False
        )
        config = PolicyConfig(backend=backend, model=model, seed=seed)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    out = out or Path(f"eval-{_time.strftime('%Y%m%d-%H%M%S')}.json")
    try:
        with console.status("loading the model"):
            policy = make_policy(config)
    except (PolicyError, ValueError, OSError) as exc:
        raise _fail(f"cannot load the model: {exc}") from None

    def progress(name: str, result) -> None:
        if result is None:
            console.print(f"running suite {name} ...")
        else:
            console.print(f"  {name}: {result.correct}/{result.n} correct ({result.seconds:.0f} s)")

    try:
        with SandboxPool(SandboxConfig()) as pool:
            ctx = EvalContext(limit=limit, seed=seed, sampling=sampling, pool=pool, batch_size=batch_size)
            result = run_eval(
                policy, built, ctx, model=model or DEFAULT_MODEL, backend=backend, on_suite=progress
            )
    except SandboxUnavailable as exc:
        raise _fail(str(exc)) from None
    except (ValueError, PolicyError) as exc:
        raise _fail(f"the evaluation stopped: {exc}") from None
    finally:
        policy.close()
    try:
        result.write(out)
    except (OSError, ValueError) as exc:
        raise _fail(f"cannot write {out}: {exc}") from None
    console.print(results_table(result))
    if any(item.detail.get("category") for s in result.suites.values() for item in s.items):
        console.print(categories_table(result))
    console.print(f"wrote {out} ({result.seconds:.0f} s)")


def _parse_suite_options(pairs: list[str]) -> dict[str, dict[str, str]]:
    """``["envs.episodes=4", ...]`` as ``{"envs": {"episodes": "4"}}``; values stay text (suites convert)."""
    parsed: dict[str, dict[str, str]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        suite, dot, name = key.strip().partition(".")
        if not sep or not dot or not suite or not name:
            raise ValueError(f"--option {pair!r}: write suite.key=value, for example envs.episodes=4")
        parsed.setdefault(suite, {})[name] = value.strip()
    return parsed


def _eval_compare(path_a: Path, path_b: Path) -> None:
    from spade_rl.evaluate.results import EvalResult, ResultFileError, compare
    from spade_rl.evaluate.tables import compare_table

    try:
        a, b = EvalResult.read(path_a), EvalResult.read(path_b)
    except ResultFileError as exc:
        raise _fail(str(exc)) from None
    rows = compare(a, b)
    console.print(compare_table(rows, a, b))
    if not all(row.comparable for row in rows):
        console.print("[yellow]some rows are not comparable: their differences are not tested[/]")


@app.command()
def experiment(
    file: Path = typer.Argument(..., help="The experiment file (see experiments/)."),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="The experiment folder (default: runs/experiments/<name>); resumed if it exists.",
    ),
    check: bool = typer.Option(
        False, "--check", help="Check the file and every arm's configuration, run nothing."
    ),
) -> None:
    """Run several arms (configurations of the loop) with one budget and compare them on held-out suites."""
    from rich.markup import escape

    from spade_rl.corpus import CorpusError
    from spade_rl.experiment import ExperimentError, load_experiment
    from spade_rl.loop.config import ConfigError
    from spade_rl.policy import PolicyError

    try:
        spec = load_experiment(file)
    except (ExperimentError, ConfigError) as exc:
        raise _fail(str(exc)) from None
    folder = out or Path("runs") / "experiments" / spec.name
    arms = ", ".join(arm.name for arm in spec.arms)
    console.print(
        f"experiment {escape(spec.name)}: arms {escape(arms)}; seeds {list(spec.seeds)}; "
        f"{spec.budget.describe()}; evaluation {', '.join(spec.evaluation.suites)} "
        f"(limit {spec.evaluation.limit}); baseline {escape(spec.baseline or 'none')}; "
        f"{escape(spec.placement.describe())}",
        highlight=False,
    )
    if check:
        console.print("every arm's configuration is valid; nothing run (--check)")
        return
    from spade_rl.experiment import run_experiment

    try:
        outcome = run_experiment(spec, folder, progress=lambda m: console.print(escape(m), highlight=False))
    except (ExperimentError, ConfigError, CorpusError, PolicyError, SandboxUnavailable) as exc:
        raise _fail(str(exc)) from None
    console.print(
        outcome.comparison_md.read_text(encoding="utf-8"), markup=False, highlight=False, soft_wrap=True
    )
    for warning in outcome.warnings:
        console.print(f"[yellow]note:[/] {escape(warning)}", highlight=False)
    console.print(f"comparison: {outcome.comparison_json}, {outcome.comparison_md}", highlight=False)
    if outcome.figure is not None:
        console.print(f"figure: {outcome.figure}", highlight=False)
