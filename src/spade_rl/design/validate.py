"""The validation battery: run an environment source through the sandbox and say whether it is valid.

Each failed check has a stable reason code (``ValidationReport.reason``), used as data: in the
archive, in designer rewards and in statistics. The battery never raises for anything the
environment does; an exception here is a bug of ours.

Checks, in order (the first failure decides the verdict):

- static, in this process, never running the code: ``syntax_error``, ``no_env_class``,
  ``multiple_env_classes``, ``disallowed_import`` (imports outside the allow-list: the standard
  library by default, plus any configured extras such as numpy);
- ``load_raised`` / ``init_raised``: the module body or the constructor raised;
- ``reset_raised`` / ``reset_bad_type``: ``reset(seed)`` answers ``(non-empty str, dict)``;
- ``solution_raised`` / ``solution_bad_type``: ``solution()`` gives one or more actions, no more
  than ``max_turns``;
- ``step_raised`` / ``step_bad_type`` / ``reward_not_finite`` / ``reward_out_of_range``: every
  ``step`` below answers a correctly typed 5-tuple with a finite reward in range;
- ``solution_does_not_win``: replaying ``solution()`` through ``step`` ends terminated with the
  maximum reward, on every seed validation plays (``seeds``: the configured seed, then seeds drawn
  from the source's hash, as training draws its own: an environment honest only at one seed fails);
- the reset gate, when ``reset_gate_seeds`` is set (the reference's SPADE_RESET_GATE, off by default):
  ``reset`` with that many more seeds answers well-typed observations, and
  ``same_instance_every_seed`` when every one of those seeds gives the same instance (the same first
  observation and the same ``solution()``: the seed is ignored), ``step_check_raises`` when the
  reset info lists ``unevaluable_steps`` (the tool kit's steps whose check raises on the initial
  state) at every one of them (a check that raises whatever the data is a bug; one that raises on
  some seeds only is kept, as the reference keeps it);
- the empty action and a malformed action each get a well-typed answer, and
  ``malformed_action_wins`` when one ends the episode with the maximum reward;
- ``never_terminates``: malformed actions end the episode (terminated or truncated) within
  ``max_turns`` steps (and that episode is not won: ``malformed_action_wins``);
- ``nondeterministic``: a fresh interpreter, reset with the same seeds and given the same actions,
  gives identical transcripts (catches wall-clock use, unseeded RNGs and hash-order dependence);
- ``instance_dependent``: a second instance created in the same worker, played interleaved with the
  first as training plays several episodes in one worker, gives the same transcripts (catches class
  attributes and module globals shared between instances, and code honest only for the first one);
- ``hint_leaks_answer``: the hint, when given, does not contain the final answer of any seed played
  (unless it is one answer at every seed that every first observation states: the tool kit's "done"
  of a stepped task is no secret);
- ``trivial_policy_wins``: no policy of a fixed set of trivial ones (one short action repeated;
  answers drawn at random from the numbers and words of the first observation, in the format it
  asks for) wins more than ``max_trivial_win_rate`` of ``trivial_seeds`` seeds (15% by default, as
  the reference implementation refuses what random guessing wins);
- ``judge_rejected``: an optional judge (for example an LLM) accepts it; off by default;
- sandbox failures during any call: ``timeout``, ``crashed``, ``memory``, ``output_too_large``,
  ``protocol_error``, ``worker_lost``; ``validation_timeout`` when the whole battery runs past its
  budget.

Every environment is validated with the constructor arguments it will be played with
(``ValidationReport.env_kwargs``, recorded in the archive and used by every play). ``REASONS`` lists
every code; a report never carries another (a code from elsewhere would be a bug, reported as
``protocol_error``). The text checks (final answers, leaking hints, trivial policies' actions) are in
:mod:`spade_rl.design.answers`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from spade_rl.design.answers import final_answer, leaked_answer, trivial_actions
from spade_rl.design.llm_validator import LLMValidatorSettings
from spade_rl.envs.contract import (
    ContractViolation,
    check_reset_value,
    check_solution_value,
    check_step_value,
)
from spade_rl.envs.loader import find_env_classes
from spade_rl.sandbox import CallResult, EnvHandle, Sandbox, Status

MALFORMED_ACTIONS = ("", "this is not a valid action %%% \\boxed{??}")
REASONS = frozenset(
    {
        "ok", "syntax_error", "no_env_class", "multiple_env_classes", "disallowed_import", "load_raised",
        "init_raised", "reset_raised", "reset_bad_type", "solution_raised", "solution_bad_type",
        "step_raised", "step_bad_type", "reward_not_finite", "reward_out_of_range",
        "solution_does_not_win", "malformed_action_wins", "never_terminates", "instance_dependent",
        "nondeterministic", "hint_leaks_answer", "trivial_policy_wins", "judge_rejected", "timeout",
        "same_instance_every_seed", "step_check_raises",
        "crashed", "memory", "output_too_large", "protocol_error", "worker_lost", "validation_timeout",
    }
)  # fmt: skip
Judge = Callable[[str, str], tuple[bool, str]]  # (source, hint) -> (accepted, why)


@dataclass
class ValidationReport:
    valid: bool
    reason: str  # "ok" or the code of the first failed check
    message: str = ""
    class_name: str = ""
    checks: list[str] = field(default_factory=list)  # the checks that passed, in order
    timings: dict[str, float] = field(default_factory=dict)  # seconds per check
    seconds: float = 0.0
    solution_turns: int = 0
    env_kwargs: dict = field(default_factory=dict)  # the constructor arguments it was validated with

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ValidationSettings:
    seed: int = 0  # the first seed played; the others are drawn from the source's hash
    seeds: int = 3  # seeds the solution is played on (and the hint checked against)
    instances: int = 2  # instances played interleaved in one worker (1: no such check)
    trivial_seeds: int = 8  # seeds each trivial policy plays (0: no trivial-policy check)
    max_trivial_win_rate: float = 0.15  # the largest share of those a trivial policy may win
    max_turns: int = 25  # passed to the constructor when it takes ``max_turns``; the episode cap
    reward_range: tuple[float, float] = (0.0, 1.0)
    env_kwargs: dict = field(default_factory=dict)
    allowed_imports: frozenset[str] | None = None  # top-level module names; None: the standard library
    extra_imports: tuple[str, ...] = ()  # allowed on top of the standard library, e.g. ("numpy",)
    call_timeout_s: float = 2.0
    total_timeout_s: float = 20.0
    check_determinism: bool = True
    judge: Judge | None = None
    # The reference's validation extras (spade/core/orchestrator.py), each off by default:
    # reset gate: seeds reset beyond ``seeds`` (the reference resets 3: criteria_throw_at_reset in
    # spade/core/envs/synthetic_game_env.py, under SPADE_RESET_GATE=1 in cmd/tool_use); 0: no gate.
    reset_gate_seeds: int = 0
    # repair loop: rounds an invalid design is sent back to its designer with the failure's message
    # (the reference's env_repair_turns, default 0; spade_rl.design.repair); the design phase runs it.
    repair_rounds: int = 0
    # the LLM validator: the policy reads a design that passed the battery and gives a verdict
    # (the reference's --spade-use-env-validator; spade_rl.design.llm_validator); the design phase runs it.
    llm_validator: LLMValidatorSettings = field(default_factory=LLMValidatorSettings)

    def __post_init__(self) -> None:
        low, high = self.reward_range
        if not low < high:
            raise ValueError(f"reward_range must be (low, high) with low < high, got {self.reward_range}")
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {self.max_turns}")
        if self.call_timeout_s <= 0 or self.total_timeout_s <= 0:
            raise ValueError("call_timeout_s and total_timeout_s must be positive")
        for name in ("reset_gate_seeds", "repair_rounds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 64:
                raise ValueError(f"{name} must be a whole number from 0 (off) to 64, got {value!r}")
        if not isinstance(self.llm_validator, LLMValidatorSettings):
            raise ValueError(
                f"llm_validator must be LLMValidatorSettings, got {type(self.llm_validator).__name__}"
            )
        if self.seeds < 1 or self.instances < 1 or self.trivial_seeds < 0:
            raise ValueError(
                f"seeds and instances must be at least 1 and trivial_seeds at least 0, got seeds="
                f"{self.seeds}, instances={self.instances}, trivial_seeds={self.trivial_seeds}"
            )
        if not 0.0 <= self.max_trivial_win_rate <= 1.0:
            raise ValueError(f"max_trivial_win_rate must lie in [0, 1], got {self.max_trivial_win_rate}")

    def allowed(self) -> frozenset[str]:
        base = (
            self.allowed_imports if self.allowed_imports is not None else frozenset(sys.stdlib_module_names)
        )
        return base | frozenset(self.extra_imports)


class _Failed(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


# --- static checks (no code runs) ------------------------------------------------------------------
def imported_modules(tree: ast.AST) -> list[str]:
    """Top-level names of every module imported anywhere in the tree ("." for relative imports)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.append("." if node.level else (node.module or "").split(".")[0])
    return names


def takes_max_turns(tree: ast.Module, class_name: str, _seen: frozenset[str] = frozenset()) -> bool:
    """Whether the class's ``__init__`` has a ``max_turns`` parameter (or ``**kwargs``); a class
    without its own ``__init__`` inherits the first one found among its bases defined (or aliased by
    ``Name = Class``) in the same module (a design of a kit inherits the kit's)."""
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for node in tree.body:  # a module-level alias of a class (the tool kit's ToolUseBaseEnv = ToolUseTask)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in classes:
            classes.update({t.id: classes[node.value.id] for t in node.targets if isinstance(t, ast.Name)})
    node = classes.get(class_name)
    if node is None or class_name in _seen:
        return False
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            args = item.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            return "max_turns" in names or args.kwarg is not None
    bases = [b.id for b in node.bases if isinstance(b, ast.Name) and b.id in classes]
    return any(takes_max_turns(tree, base, _seen | {class_name}) for base in bases[:1])


def constructor_kwargs(source: str, max_turns: int, extra: dict | None = None) -> dict:
    """The constructor arguments an environment is validated and played with: ``max_turns`` when its
    ``__init__`` takes it, then ``extra`` (which wins). A source without exactly one parseable ``*Env``
    class gets ``extra`` alone (it cannot be played anyway)."""
    try:
        names = find_env_classes(source)
        takes = len(names) == 1 and takes_max_turns(ast.parse(source), names[0])
    except (ContractViolation, SyntaxError, ValueError, MemoryError, RecursionError):
        takes = False
    return {**({"max_turns": max_turns} if takes else {}), **(extra or {})}


def play_kwargs(source: str, recorded: dict | None, max_turns: int) -> dict:
    """The constructor arguments to play an environment with: those its validation recorded, or, for a
    record written before they were recorded (``None``), what validation with ``max_turns`` gives it."""
    return dict(recorded) if recorded is not None else constructor_kwargs(source, max_turns)


def static_checks(source: str, settings: ValidationSettings) -> tuple[str, bool]:
    """Returns the class name and whether it takes ``max_turns``; raises ``_Failed``."""
    try:
        names = find_env_classes(source)
    except ContractViolation as exc:
        raise _Failed(exc.reason, str(exc)) from None
    if len(names) != 1:
        reason = "no_env_class" if not names else "multiple_env_classes"
        raise _Failed(reason, f"expected exactly one top-level *Env class, found {names or 'none'}")
    tree = ast.parse(source)
    allowed = settings.allowed()
    bad = sorted({name for name in imported_modules(tree) if name not in allowed})
    if bad:
        raise _Failed(
            "disallowed_import",
            f"imports {', '.join(bad)}; allowed: the standard library"
            + (f" and {', '.join(settings.extra_imports)}" if settings.extra_imports else "")
            + " (relative imports are never allowed)",
        )
    return names[0], takes_max_turns(tree, names[0])


# --- the battery -----------------------------------------------------------------------------------
class _Battery:
    def __init__(self, sandbox: Sandbox, source: str, hint: str, settings: ValidationSettings):
        self.sandbox = sandbox
        self.source = source
        self.hint = hint
        self.settings = settings
        self.report = ValidationReport(valid=False, reason="ok")
        self.started = time.perf_counter()
        self.handles: list[EnvHandle] = []

    def passed(self, check: str, since: float) -> None:
        now = time.perf_counter()
        self.report.checks.append(check)
        self.report.timings[check] = now - since
        if now - self.started > self.settings.total_timeout_s:
            raise _Failed(
                "validation_timeout",
                f"validation took over its budget of {self.settings.total_timeout_s} s (after {check})",
            )

    def open(self, kwargs: dict, fresh_worker: bool = False, beside: EnvHandle | None = None) -> EnvHandle:
        opened = self.sandbox.open(self.source, kwargs, self.settings.call_timeout_s, fresh_worker, beside)
        handle = _value(opened, "open")
        self.handles.append(handle)
        return handle

    def reset(self, env: EnvHandle, seed: int) -> list:
        value = _value(env.reset(seed, self.settings.call_timeout_s), "reset")
        _contract(check_reset_value, value)
        return value

    def step(self, env: EnvHandle, action: str) -> list:
        value = _value(env.step(action, self.settings.call_timeout_s), "step")
        _contract(check_step_value, value, self.settings.reward_range)
        return value

    def solution(self, env: EnvHandle) -> list[str]:
        actions = _contract(
            check_solution_value, _value(env.solution(self.settings.call_timeout_s), "solution")
        )
        if len(actions) > self.settings.max_turns:
            raise _Failed(
                "solution_bad_type",
                f"solution() has {len(actions)} actions; max_turns is {self.settings.max_turns}",
            )
        return actions

    def won(self, result: list) -> bool:
        return bool(result[2]) and result[1] >= self.settings.reward_range[1]

    def play(self, env: EnvHandle, seed: int, actions: list[str], first: list | None = None) -> list:
        """Reset (unless ``first`` is the answer of a reset just made), then the actions until the
        episode ends; the transcript as JSON-able values."""
        transcript = [first if first is not None else self.reset(env, seed)]
        for action in actions:
            result = self.step(env, action)
            transcript.append(result)
            if result[2] or result[3]:
                break
        return transcript

    def play_together(self, envs: list[EnvHandle], seed: int, actions: list[str]) -> list[list]:
        """The same episode on several instances at once, as training interleaves them: every reset
        first, then each step on every instance in turn."""
        transcripts = [[self.reset(env, seed)] for env in envs]
        for action in actions:
            for env, transcript in zip(envs, transcripts, strict=True):
                if len(transcript) > 1 and (transcript[-1][2] or transcript[-1][3]):
                    continue
                transcript.append(self.step(env, action))
        return transcripts

    def run(self) -> None:
        s, report = self.settings, self.report
        t = time.perf_counter()
        report.class_name, has_max_turns = static_checks(self.source, s)
        kwargs = {**({"max_turns": s.max_turns} if has_max_turns else {}), **s.env_kwargs}
        report.env_kwargs = dict(kwargs)
        seeds = validation_seeds(self.source, s)
        self.passed("static", t)

        t = time.perf_counter()
        env = self.open(kwargs)
        self.passed("instantiates", t)

        # Every seed: a well-typed reset, a well-typed solution, and that solution wins.
        timings = {"reset_types": 0.0, "solution_types": 0.0, "solution_wins": 0.0}
        transcripts: dict[int, list] = {}
        solutions: dict[int, list[str]] = {}
        for seed in seeds:
            t = time.perf_counter()
            first = self.reset(env, seed)
            timings["reset_types"] += time.perf_counter() - t
            t = time.perf_counter()
            actions = solutions[seed] = self.solution(env)
            timings["solution_types"] += time.perf_counter() - t
            t = time.perf_counter()
            transcript = transcripts[seed] = self.play(env, seed, actions, first)
            last, turns = transcript[-1], len(transcript) - 1
            if not (turns >= 1 and self.won(last)):
                ended = (
                    "terminated" if turns and last[2] else "truncated" if turns and last[3] else "did not end"
                )
                raise _Failed(
                    "solution_does_not_win",
                    f"at seed {seed}, replaying solution() ({len(actions)} actions) {ended} after {turns} "
                    f"steps with reward {last[1] if turns else None}; a win is terminated with reward "
                    f"{s.reward_range[1]}",
                )
            timings["solution_wins"] += time.perf_counter() - t
            if seed == seeds[0]:
                report.solution_turns = turns
        for check, seconds in timings.items():
            self.passed(check, time.perf_counter() - seconds)

        if s.reset_gate_seeds:
            t = time.perf_counter()
            self.reset_gate(env)
            self.passed("reset_gate", t)

        t = time.perf_counter()
        for action in MALFORMED_ACTIONS:
            self.reset(env, seeds[0])
            if self.won(self.step(env, action)):
                raise _Failed("malformed_action_wins", f"the malformed action {action!r} wins the episode")
        self.passed("malformed_actions", t)

        t = time.perf_counter()
        self.reset(env, seeds[0])
        for _ in range(s.max_turns):
            result = self.step(env, MALFORMED_ACTIONS[1])
            if result[2] or result[3]:
                if self.won(result):
                    raise _Failed("malformed_action_wins", "repeating a malformed action wins the episode")
                break
        else:
            raise _Failed("never_terminates", f"{s.max_turns} malformed actions did not end the episode")
        self.passed("terminates", t)

        if s.check_determinism:
            t = time.perf_counter()
            fresh = self.open(kwargs, fresh_worker=True)
            for seed in seeds:
                where = _difference(self.play(fresh, seed, solutions[seed]), transcripts[seed])
                if where is not None:
                    raise _Failed(
                        "nondeterministic",
                        f"a fresh worker with seed {seed} and the same actions gave a different transcript "
                        f"at {where}",
                    )
            self.passed("deterministic", t)

        if s.instances > 1:
            t = time.perf_counter()
            others = [self.open(kwargs, beside=env) for _ in range(s.instances - 1)]
            for seed in seeds:
                together = self.play_together([env, *others], seed, solutions[seed])
                for number, transcript in enumerate(together):
                    where = _difference(transcript, transcripts[seed])
                    if where is not None:
                        raise _Failed(
                            "instance_dependent",
                            f"instance {number + 1} of {s.instances} in one worker, played interleaved with "
                            f"the others, differs from the first play of seed {seed} at {where}",
                        )
            self.passed("instances", t)

        if self.hint:
            t = time.perf_counter()
            # One answer at every seed that the task itself states is no secret (a tool kit's "done").
            public = len({final_answer(solutions[seed][-1]) for seed in seeds}) == 1 and all(
                leaked_answer(transcripts[seed][0][0], solutions[seed][-1]) for seed in seeds
            )
            for seed in seeds:
                leaked = "" if public else leaked_answer(self.hint, solutions[seed][-1])
                if leaked:
                    raise _Failed(
                        "hint_leaks_answer", f"the hint contains the final answer {leaked!r} of seed {seed}"
                    )
            self.passed("hint_no_leak", t)

        if s.trivial_seeds:
            t = time.perf_counter()
            self.trivial_policies(env)
            self.passed("trivial_policies", t)

        if s.judge is not None:
            t = time.perf_counter()
            accepted, why = s.judge(self.source, self.hint)
            if not accepted:
                raise _Failed("judge_rejected", f"the judge rejected it: {why}")
            self.passed("judge", t)
        report.valid = True

    def reset_gate(self, env: EnvHandle) -> None:
        """Reset with ``reset_gate_seeds`` more seeds: each answers a well-typed observation; not every
        one the same instance; not every one with a step whose check raises at the start."""
        s = self.settings
        seeds = derived_seeds(self.source, "reset_gate", s.seed, s.reset_gate_seeds)
        instances, raising = set(), []
        for seed in seeds:
            observation, info = self.reset(env, seed)
            instances.add(_canonical([observation, self.solution(env)]))
            steps = info.get("unevaluable_steps")
            raising.append(steps if isinstance(steps, list) and steps else None)
        if len(seeds) > 1 and len(instances) == 1:
            raise _Failed(
                "same_instance_every_seed",
                f"reset() with {len(seeds)} different seeds gave the same first observation and the same "
                "solution() every time: draw the instance from random.Random(seed)",
            )
        if all(raising):
            raise _Failed(
                "step_check_raises",
                f"the check of step {_short(raising[0])} raises on the initial state at every one of "
                f"{len(seeds)} seeds (the reset gate): it can never be met; make the check read only "
                "what make() set up",
            )

    def trivial_policies(self, env: EnvHandle) -> None:
        """Each trivial policy plays ``trivial_seeds`` seeds; one that wins too often fails."""
        s = self.settings
        seeds = derived_seeds(self.source, "trivial", s.seed, s.trivial_seeds)
        wins: dict[str, int] = {}
        for seed in seeds:
            first = self.reset(env, seed)
            for number, (name, actions) in enumerate(trivial_actions(first[0], seed, s.max_turns).items()):
                transcript = self.play(env, seed, actions, first if number == 0 else None)
                wins[name] = wins.get(name, 0) + self.won(transcript[-1])
        name, count = max(wins.items(), key=lambda item: item[1])
        if count > s.max_trivial_win_rate * len(seeds):
            raise _Failed(
                "trivial_policy_wins",
                f"the trivial policy '{name}' wins {count} of {len(seeds)} seeds; at most "
                f"{s.max_trivial_win_rate:.0%} may be won without playing (max_trivial_win_rate)",
            )


def validate_source(
    sandbox: Sandbox, source: str, settings: ValidationSettings | None = None, hint: str = ""
) -> ValidationReport:
    """Run the battery on ``source`` (and ``hint``); never raises for anything the environment does."""
    battery = _Battery(sandbox, source, hint, settings or ValidationSettings())
    try:
        battery.run()
    except _Failed as exc:
        battery.report.reason, battery.report.message = exc.reason, str(exc)
    finally:
        for handle in battery.handles:
            handle.close()
        battery.report.seconds = time.perf_counter() - battery.started
    if battery.report.reason not in REASONS:  # a bug of ours: a code nobody downstream knows
        battery.report.message = f"unknown reason code {battery.report.reason!r}: {battery.report.message}"
        battery.report.reason = "protocol_error"
    return battery.report


# --- helpers -----------------------------------------------------------------------------------------
def _value(result: CallResult, phase: str):
    if result.ok:
        return result.value
    if result.status is Status.EXCEPTION:
        reason = {"exception": f"{phase}_raised", "unserializable": f"{phase}_bad_type"}.get(
            result.reason, result.reason
        )
        detail = f"{result.error_type}: {result.error}" if result.error_type else result.error
        raise _Failed(reason, f"{phase}: {detail}")
    raise _Failed(result.reason, f"{phase}: {result.error}")


def _contract(check, *args):
    try:
        return check(*args)
    except ContractViolation as exc:
        raise _Failed(exc.reason, str(exc)) from None


def _short(value) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def _canonical(transcript: list) -> str:
    return json.dumps(transcript, sort_keys=True, default=repr)


def _difference(transcript: list, expected: list) -> str | None:
    """Where two transcripts first differ ("reset", "step N", or None when they are the same)."""
    if _canonical(transcript) == _canonical(expected):
        return None
    for index in range(max(len(transcript), len(expected))):
        if index >= len(transcript) or index >= len(expected):
            return f"step {index} (one transcript ends earlier)"
        if _canonical(transcript[index]) != _canonical(expected[index]):
            return "reset" if index == 0 else f"step {index}"
    return "an unknown place"  # equal item by item, yet not as a whole: not reachable with JSON values


def derived_seeds(source: str, purpose: str, seed: int, count: int) -> list[int]:
    """``count`` distinct seeds in [0, 2**31) drawn from the source's hash, ``purpose`` and ``seed``:
    the same source always gets the same ones (validation is reproducible), as unpredictable to an
    environment as the seeds training draws from the run's generator."""
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    rng = random.Random(f"{purpose}:{seed}:{digest}")
    seeds: list[int] = []
    while len(seeds) < count:
        drawn = rng.randrange(2**31)
        if drawn != seed and drawn not in seeds:
            seeds.append(drawn)
    return seeds


def validation_seeds(source: str, settings: ValidationSettings) -> list[int]:
    """The seeds the solution is played on: ``settings.seed``, then ``seeds - 1`` derived ones."""
    return [settings.seed, *derived_seeds(source, "seeds", settings.seed, settings.seeds - 1)]
