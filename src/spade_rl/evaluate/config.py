"""The ``[eval]`` table of a run: in-loop evaluation of held-out suites (and ``spade-rl experiment``'s)."""

from __future__ import annotations

from dataclasses import dataclass, field

from spade_rl.configdata import ConfigError


@dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation of the policy being trained (:mod:`spade_rl.evaluate`), greedy.

    ``every`` E > 0 evaluates after every E-th iteration's update (0: never) on ``suites``, at most
    ``limit`` items per suite (per task or environment), with ``seed``; ``options`` holds per-suite
    options as tables (``[eval.options.envs]`` ``episodes = 2``). The result goes to
    ``RUN_DIR/eval/iter-NNNN.json`` and ``eval/<suite>/accuracy`` (with ``ci_low``, ``ci_high``, ``n``)
    into that iteration's metrics line. ``spade-rl experiment`` uses the same table for its evaluations
    at the start and the end of every arm.
    """

    every: int = 0
    suites: tuple[str, ...] = ("envs",)
    limit: int = 4
    seed: int = 0
    max_new_tokens: int = 256
    batch_size: int = 16
    options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        from spade_rl.evaluate.base import SUITES

        if self.every < 0:
            raise ConfigError(f"eval.every must be 0 (never) or a number of iterations, got {self.every}")
        for name, least in (("limit", 1), ("max_new_tokens", 1), ("batch_size", 1), ("seed", 0)):
            if getattr(self, name) < least:
                raise ConfigError(f"eval.{name} must be at least {least}, got {getattr(self, name)}")
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

    def check_suites(self) -> None:
        """Build every suite with its options (importing its module): unknown options, bad values and
        missing optional packages fail here, before anything runs."""
        from spade_rl.evaluate.runner import build_suites

        try:
            build_suites(list(self.suites), self.options)
        except ValueError as exc:  # SuiteUnavailable is a ValueError too
            raise ConfigError(f"eval: {exc}") from None
