"""The ``[eval]`` table of a run: in-loop evaluation of held-out suites (and ``spade-rl experiment``'s)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from spade_rl.configdata import ConfigError

if TYPE_CHECKING:
    from spade_rl.evaluate.base import EvalContext
    from spade_rl.sandbox import Sandbox


@dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation of the policy being trained (:mod:`spade_rl.evaluate`), greedy by default.

    ``every`` E > 0 evaluates after every E-th iteration's update (0: never) on ``suites``, at most
    ``limit`` items per suite (per task or environment), with ``seed``; ``options`` holds per-suite
    options as tables (``[eval.options.envs]`` ``episodes = 2``). The result goes to
    ``RUN_DIR/eval/iter-NNNN.json`` and ``eval/<suite>/accuracy`` (with ``ci_low``, ``ci_high``, ``n``)
    into that iteration's metrics line. ``spade-rl experiment`` uses the same table for its evaluations
    at the start and the end of every arm.

    ``samples`` N > 1 samples every item N times at ``temperature`` (> 0; the paper: 8 at 0.6 for
    Reasoning Gym) and reports pass@k (k = 1, 2, 4, ..., N, the unbiased estimator) and the mean accuracy
    over samples; with ``greedy`` (the default) each item is also answered greedily once, and that is
    its accuracy. ``samples = 1`` is one answer per item at ``temperature`` (0: greedy), as before.
    """

    every: int = 0
    suites: tuple[str, ...] = ("envs",)
    limit: int = 4
    seed: int = 0
    max_new_tokens: int = 256
    batch_size: int = 16
    samples: int = 1
    temperature: float = 0.0
    greedy: bool = True
    options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        from spade_rl.evaluate.base import SUITES

        if self.every < 0:
            raise ConfigError(f"eval.every must be 0 (never) or a number of iterations, got {self.every}")
        for name, least in (("limit", 1), ("max_new_tokens", 1), ("batch_size", 1), ("seed", 0)):
            if getattr(self, name) < least:
                raise ConfigError(f"eval.{name} must be at least {least}, got {getattr(self, name)}")
        from spade_rl.evaluate.sampled import check_samples

        try:
            check_samples(self.samples, self.temperature, "eval")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not isinstance(self.greedy, bool):
            raise ConfigError(f"eval.greedy must be true or false, got {self.greedy!r}")
        if not self.suites:
            raise ConfigError(f"eval.suites must name at least one suite; known: {list(SUITES)}")
        unknown = [s for s in self.suites if s not in SUITES]
        if unknown or len(set(self.suites)) != len(self.suites):
            raise ConfigError(
                f"eval.suites {list(self.suites)}: each once, from {list(SUITES)}"
                + (f" (unknown: {unknown})" if unknown else "")
            )
        for suite, options in self.options.items():
            if suite not in self.suites:
                raise ConfigError(
                    f"eval.options.{suite}: options for a suite that is not run; eval.suites is "
                    f"{list(self.suites)}"
                )
            if not isinstance(options, dict):
                raise ConfigError(f"eval.options.{suite} must be a table of suite options, got {options!r}")

    def context(self, sandbox: Sandbox) -> EvalContext:
        """The :class:`~spade_rl.evaluate.base.EvalContext` of this table, untrusted code in ``sandbox``."""
        from spade_rl.evaluate.base import GREEDY, EvalContext

        return EvalContext(
            limit=self.limit,
            seed=self.seed,
            sampling=replace(GREEDY, max_new_tokens=self.max_new_tokens, temperature=self.temperature),
            sandbox=sandbox,
            batch_size=self.batch_size,
            options={name: dict(options) for name, options in self.options.items()},
            samples=self.samples,
            greedy=self.greedy,
        )

    def check_suites(self) -> None:
        """Build every suite with its options (importing its module): unknown options, bad values and
        missing optional packages fail here, before anything runs."""
        from spade_rl.evaluate.runner import build_suites

        try:
            build_suites(list(self.suites), self.options)
        except ValueError as exc:  # SuiteUnavailable is a ValueError too
            raise ConfigError(f"eval: {exc}") from None
