"""``spade-rl eval [--model M] [--suite S ...] [--limit N] [--option suite.key=value ...] [--out FILE]``:
held-out evaluation, written as a JSON result; ``spade-rl eval --compare A.json B.json``: two results
side by side, with significance tests. ``--samples 8 --temperature 0.6`` samples every item 8 times and
reports pass@k (k = 1, 2, 4, 8) and the mean accuracy over samples beside the greedy accuracy
(``--no-greedy`` skips the greedy run). Without ``--suite`` every suite whose packages are installed runs,
and one line names the others and how to install them; a suite named with ``--suite`` must be installed.
Items whose checker or environment failed are errors: counted, shown, and left out of accuracy."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from spade_rl.cli.common import console, fail
from spade_rl.sandbox import Sandbox, SandboxConfig, SandboxUnavailable


def eval_(
    model: str | None = typer.Option(
        None, "--model", "-m", help="Model name or path (default: SmolLM2-135M)."
    ),
    suites: list[str] = typer.Option(
        None,
        "--suite",
        "-s",
        help="A suite to run (repeat for more; default: every installed one): reasoning_gym, bfcl, ...",
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
    temperature: float = typer.Option(
        0.0, "--temperature", min=0.0, help="0 is greedy; with --samples N > 1 that of the samples."
    ),
    samples: int = typer.Option(
        1, "--samples", help="Samples per item (N > 1: pass@k and mean accuracy over samples; 1: one answer)."
    ),
    greedy: bool = typer.Option(
        True, "--greedy/--no-greedy", help="With --samples N > 1, also answer each item greedily once."
    ),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Chats per generation call."),
) -> None:
    """Evaluate a model on held-out suites and write a JSON result; or compare two results."""
    if compare_files is not None:
        if model or suites or options or out or limit:
            raise fail(
                "--compare reads two result files; it takes no --model, --suite, --option, --limit or --out"
            )
        _eval_compare(*compare_files)
        return
    import time as _time

    from spade_rl.evaluate.base import SUITE_INSTALL, EvalContext
    from spade_rl.evaluate.runner import build_available_suites, build_suites, run_eval
    from spade_rl.evaluate.sampled import check_samples
    from spade_rl.evaluate.tables import categories_table, pass_text, results_table
    from spade_rl.policy import DEFAULT_MODEL, PolicyConfig, PolicyError, SamplingSettings, make_policy

    skipped: dict[str, str] = {}
    try:
        check_samples(samples, temperature, "-")
        suite_options = _parse_suite_options(options or [])
        if suites:
            built = build_suites(list(suites), suite_options)
        else:
            built, skipped = build_available_suites(suite_options)
        sampling = SamplingSettings(
            max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, logprobs=False
        )
        config = PolicyConfig(backend=backend, model=model, seed=seed)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if skipped:  # one line; escaped, as install commands hold brackets ('spade-rl[gem]')
        install = ", ".join(f"{name} ({SUITE_INSTALL.get(name) or skipped[name]})" for name in skipped)
        console.print(f"[yellow]skipped suites whose packages are not installed: {escape(install)}[/]")
    out = out or Path(f"eval-{_time.strftime('%Y%m%d-%H%M%S')}.json")
    try:
        with console.status("loading the model"):
            policy = make_policy(config)
    except (PolicyError, ValueError, OSError) as exc:
        raise fail(f"cannot load the model: {exc}") from None

    def progress(name: str, result) -> None:
        if result is None:
            console.print(f"running suite {name} ...")
        else:
            sampled = f", pass@k {pass_text(result.pass_at_k)}" if result.samples else ""
            console.print(f"  {name}: {result.summary()}{sampled} ({result.seconds:.0f} s)")

    try:
        with Sandbox(SandboxConfig()) as sandbox:
            ctx = EvalContext(
                limit=limit,
                seed=seed,
                sampling=sampling,
                sandbox=sandbox,
                batch_size=batch_size,
                samples=samples,
                greedy=greedy,
            )
            result = run_eval(
                policy, built, ctx, model=model or DEFAULT_MODEL, backend=backend, on_suite=progress
            )
    except SandboxUnavailable as exc:
        raise fail(str(exc)) from None
    except (ValueError, PolicyError) as exc:
        raise fail(f"the evaluation stopped: {exc}") from None
    finally:
        policy.close()
    try:
        result.write(out)
    except (OSError, ValueError) as exc:
        raise fail(f"cannot write {out}: {exc}") from None
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
        raise fail(str(exc)) from None
    rows = compare(a, b)
    console.print(compare_table(rows, a, b))
    if not all(row.comparable for row in rows):
        console.print("[yellow]some rows are not comparable: their differences are not tested[/]")
    left_out = sum(row.left_out for row in rows if row.category is None)
    if left_out:
        console.print(
            f"[yellow]{left_out} item(s) left out of the comparison: errors (their checker or environment "
            "failed) on one side or both[/]"
        )
