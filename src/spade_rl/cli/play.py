"""``spade-rl play ENV [--model M | --human] [--episodes N] [--hint] ...``: watch a model, or yourself,
play an environment (a name from `spade-rl envs list`, a file, or an archive id) in the sandbox, turn
by turn."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer
from rich.table import Table

from spade_rl.cli.common import ARCHIVE_OPTION, console, fail, open_archive, read_env
from spade_rl.envs.sources import NAMED, reference_entry
from spade_rl.rollout import EpisodeSpec, RolloutConfig, play_episode, run_episodes
from spade_rl.sandbox import Sandbox, SandboxConfig, SandboxUnavailable
from spade_rl.stats import summarise


def _resolve_play_target(
    env: str, archive: Path | None, hint_text: str | None, max_turns: int
) -> tuple[str, str, str, str, dict]:
    """(source, hint, setting, label, constructor arguments) of a file, a named environment, or an archive
    id. An archive environment is played with the arguments it was validated with; any other with
    ``max_turns`` when its constructor takes it, as validation would give it."""
    from spade_rl.design.validate import constructor_kwargs, play_kwargs

    if archive is not None and env.isdigit():
        with open_archive(archive) as store:
            try:
                record = store.get(int(env))
            except (KeyError, ValueError) as exc:
                raise fail(f"no environment {env} in {archive}: {exc}") from None
        kwargs = play_kwargs(record.source, record.env_kwargs, max_turns)
        return record.source, hint_text or record.hint, record.setting, f"archive env {env}", kwargs
    if env in NAMED and not Path(env).is_file():  # a named environment: its own setting and hint
        entry = reference_entry(env)
        return (
            entry.source,
            hint_text or entry.hint,
            entry.setting,
            env,
            constructor_kwargs(entry.source, max_turns),
        )
    source = read_env(env)
    setting = "tool_use" if "<tool_call>" in source else "games"
    return source, hint_text or "", setting, env, constructor_kwargs(source, max_turns)


def play(
    env: str = typer.Argument(
        ..., help="A name (spade-rl envs list), an environment file, or an archive id (--archive)."
    ),
    model: str | None = typer.Option(
        None, "--model", "-m", help="Model name or path (default: SmolLM2-135M)."
    ),
    human: bool = typer.Option(False, "--human", help="Play yourself: type each action."),
    episodes: int = typer.Option(1, "--episodes", "-n", min=1, help="Episodes to play (batched)."),
    hint: bool = typer.Option(False, "--hint", help="Also play with the hint and compare win rates."),
    hint_text: str | None = typer.Option(
        None, "--hint-text", help="The hint (default: the archive's, or a named environment's own)."
    ),
    archive: Path | None = ARCHIVE_OPTION,
    seed: int = typer.Option(0, "--seed", help="Seed of the first episode (episode i uses seed + i)."),
    max_turns: int = typer.Option(25, "--max-turns", min=1),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", min=1),
    temperature: float = typer.Option(0.6, "--temperature", min=0.0),
    action_prefix: bool = typer.Option(
        True,
        "--action-prefix/--no-action-prefix",
        help="Open every game turn with \\boxed{ and stop it at } as spade-rl run's defaults do "
        "(rollout.action_prefix); --no-action-prefix lets the model write its whole turn.",
    ),
) -> None:
    """Watch a model (or yourself, with --human) play an environment in the sandbox, turn by turn."""
    source, hint_value, setting, label, env_kwargs = _resolve_play_target(env, archive, hint_text, max_turns)
    if hint and not hint_value:
        raise fail(f"--hint needs a hint: {label} has none; give one with --hint-text")
    # With --hint a person plays with the hint, a model plays each seed both without and with it.
    spec = EpisodeSpec(
        source, seed=seed, hint=hint_value, use_hint=hint, setting=setting, env_kwargs=env_kwargs
    )
    try:
        with Sandbox(SandboxConfig()) as sandbox:
            if human:
                _play_human(sandbox, spec, max_turns)
            else:
                config = _model_rollout(max_turns, max_new_tokens, temperature, action_prefix)
                _play_model(sandbox, spec, label, model, episodes, config)
    except SandboxUnavailable as exc:
        raise fail(str(exc)) from None


def _model_rollout(max_turns: int, max_new_tokens: int, temperature: float, forced: bool) -> RolloutConfig:
    """The rollout of a model's play: the forced action opening and stop strings of `spade-rl run`'s
    defaults, so that it plays as training plays, unless ``forced`` is off (--no-action-prefix)."""
    from spade_rl.loop.config import load_config

    defaults = load_config(processes=1).rollout  # `spade-rl run`'s own: the CPU profile
    return RolloutConfig(
        max_turns=max_turns,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        action_prefix=defaults.action_prefix if forced else {},
        action_stop=defaults.action_stop if forced else {},
    )


def _play_model(
    sandbox,
    spec: EpisodeSpec,
    label: str,
    model: str | None,
    episodes: int,
    config: RolloutConfig,
) -> None:
    from spade_rl.policy import PolicyConfig, PolicyError, make_policy

    try:
        with console.status("loading the model"):
            policy = make_policy(PolicyConfig(model=model, seed=spec.seed))
    except (PolicyError, ValueError, OSError) as exc:
        raise fail(f"cannot load the model: {exc}") from None
    arms = [False, True] if spec.use_hint else [False]
    specs = [
        dataclasses.replace(spec, seed=spec.seed + i, use_hint=use_hint)
        for use_hint in arms
        for i in range(episodes)
    ]

    def watch(index: int, episode) -> None:  # the first episode is shown live, turn by turn
        if index != 0:
            return
        if not episode.turns:
            console.rule(f"{label}: episode 1 (seed {spec.seed})")
            console.print(f"[bold]observation[/]\n{episode.messages[1]['content']}")
            return
        turn = episode.turns[-1]
        console.print(f"[bold cyan]turn {len(episode.turns)} - model[/]\n{turn.action}")
        console.print(f"[bold]observation[/] (reward {turn.reward:g})\n{turn.observation}")

    results = run_episodes(policy, sandbox, specs, config, seed=spec.seed, on_turn=watch)
    first = results[0]
    console.print(f"episode 1 ended: {first.stop_reason} {first.error}, return {first.return_:g}")
    table = Table(title=f"{label}: {episodes} episode(s) per arm")
    for column in ("hint", "win rate", "mean return", "mean turns", "ended by"):
        table.add_column(column)
    for use_hint in arms:
        arm = summarise([e for e in results if e.spec.use_hint == use_hint])
        table.add_row(
            "with" if use_hint else "without",
            f"{arm.win_rate:.2f}",
            f"{arm.mean_return:.2f}",
            f"{arm.mean_turns:.1f}",
            ", ".join(f"{k} {v}" for k, v in arm.ended_by.items()),
        )
    console.print(table)


class _Stopped(Exception):
    """The player ended the game at the prompt (end of input, or Ctrl-C)."""


def _play_human(sandbox, spec: EpisodeSpec, max_turns: int) -> None:
    """The rollout's own episode (``rollout.play_episode``) with the actions typed at the terminal."""

    def act(episode) -> str:
        try:
            return typer.prompt(f"turn {len(episode.turns) + 1} action", default="", show_default=False)
        except (EOFError, typer.Abort):
            raise _Stopped from None

    def show(episode) -> None:
        if not episode.turns:  # the first observation, with the hint when on
            console.print(episode.messages[1]["content"])
            return
        turn = episode.turns[-1]
        console.print(f"{turn.observation}\n(reward {turn.reward:g})")

    try:
        episode = play_episode(sandbox, spec, RolloutConfig(max_turns=max_turns), act, on_turn=show)
    except _Stopped:
        console.print("stopped")
        return
    if episode.stop_reason == "env_error":
        raise fail(f"the environment failed: {episode.error}")
    if episode.stop_reason == "max_turns":
        console.print(f"out of turns ({max_turns})")
    else:
        console.print("won" if episode.won else "episode over")
