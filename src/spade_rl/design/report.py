"""What the validation battery is asked and what it answers: its settings, its report, its reason codes.

``ValidationSettings`` configures the battery of :mod:`spade_rl.design.validate`; every run of it
gives a ``ValidationReport`` whose ``reason`` is ``"ok"`` or one of ``REASONS`` (the module docstring
of ``validate`` says which check gives which code). Reports are data: the archive, designer rewards
and statistics read them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from spade_rl.design.llm_validator import LLMValidatorSettings

MALFORMED_ACTIONS = ("", "this is not a valid action %%% \\boxed{??}")
# The battery's checks, in the order they run (a report's ``checks`` lists those it passed; the optional
# ones run only with their settings), named here once: the battery checks every name it records against
# it, and the designer's progress bonus (``rewards.validation_progress``) climbs PROGRESS_CHECKS, the
# checks a default validation of a design with a hint runs.
CHECKS = (
    "static", "instantiates", "reset_types", "solution_types", "solution_wins", "reset_gate",
    "malformed_actions", "terminates", "deterministic", "instances", "stacked_instances", "hint_no_leak",
    "trivial_policies", "answer_replay", "judge", "llm_validator",
)  # fmt: skip
PROGRESS_CHECKS = tuple(
    c
    for c in CHECKS
    if c not in ("reset_gate", "judge", "llm_validator")  # off by default
)
REASONS = frozenset(
    {
        "ok", "syntax_error", "no_env_class", "multiple_env_classes", "disallowed_import", "load_raised",
        "init_raised", "reset_raised", "reset_bad_type", "solution_raised", "solution_bad_type",
        "step_raised", "step_bad_type", "reward_not_finite", "reward_out_of_range",
        "solution_does_not_win", "malformed_action_wins", "never_terminates", "instance_dependent",
        "nondeterministic", "hint_leaks_answer", "trivial_policy_wins", "judge_rejected", "timeout",
        "same_instance_every_seed", "step_check_raises", "answer_replay_wins", "undetermined_answer",
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
    seed: int = 0  # the first seed it played, the root of the others: ValidationSettings(seed=...) replays it

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ValidationSettings:
    # The first seed played, from which the others derive (design.transcripts.derived_seeds). None: a
    # new one for every validation, drawn in the trusted process from a random source (secrets) that
    # the environment cannot read or predict, as training draws its own; a number replays a report's
    # ``seed``. A fixed seed is known to whoever reads the configuration: not for designed environments.
    seed: int | None = None
    seeds: int = 3  # seeds the solution is played on (and the hint checked against)
    instances: int = 2  # instances played interleaved in one worker (1: no such check)
    # Instances made one after another in one worker, some of them played (design.transcripts.
    # probed_instances): None, as many as the sandbox lets a worker make (SandboxConfig.
    # episodes_per_worker), as training stacks episodes on a warm worker; ``instances`` or fewer: no check.
    stacked_instances: int | None = None
    # Seeds each trivial and answer-replay policy plays (0: neither check). The seeds are drawn anew for
    # every validation: 16 make a policy that wins half of them pass at most 0.2% of the time (8: 3.5%).
    trivial_seeds: int = 16
    answer_seeds: int = 32  # seeds whose solutions give the answer the answer replay plays (0: no such check)
    max_trivial_win_rate: float = 0.15  # the largest share of those a trivial policy may win
    # The largest mean return a trivial policy may earn, as a share of reward_range (None: off): an
    # environment that pays most of a win for any well-formed answer (0.9 for a wrong one, 1 for the
    # right one) is never won by a trivial policy, yet returns it 0.9 an episode, and its regret and
    # learnability are paid for answers that need no reading. Over it at the trivial seeds, the policy
    # plays trivial_confirm_seeds more and its mean over all of them decides.
    max_trivial_mean_return: float | None = 0.2
    # Seeds a trivial policy that won more than that share of trivial_seeds plays again before it is
    # refused, its rate over all of them deciding (0: refused at the first seeds). An environment such a
    # policy wins 8% of the time is refused 13% of the time at 16 seeds alone, 1.6% with 48 more.
    trivial_confirm_seeds: int = 48
    # The trivial-policy search (design.trivial_search): constants of the environment's answer space,
    # each repeated every turn (0: none), and random answers of each seed's solution's shape per seed
    # (0: none), played as training plays: the guesses may win max_trivial_win_rate of their episodes, a
    # constant max_answer_replay_win_rate of the seeds where the solution answers something else.
    answer_space_constants: int = 64
    shaped_guesses: int = 2
    # The largest share of them the answer replay's constant may win: "the same answer on most seeds".
    # (At max_trivial_win_rate it would refuse every question of three options, the kit's own example
    # of optimisation and two families of the warm-up's synthetic designs among them.)
    max_answer_replay_win_rate: float = 0.5
    # The largest share of the trivial seeds the answer replay's constant (the answer seeds' most common
    # answer) may win, counting the seeds whose own answer it is (None: off). A question whose answer is
    # 2 or 3 at random is won half the time by "2": the answer replay's half lets it through, and its
    # plays teach an agent to answer small numbers without reading (experiments/results/cpu-curriculum,
    # spade seed 0). Over the cap at the trivial seeds, the constant plays common_answer_confirm_seeds
    # more and the rate over all of them decides. On by default at 0.43, between a third and a half:
    # the experiments' 0.15 refuses sound designs whose best constant wins a third of the seeds (a
    # question of three options; tests/design/designs/valid_multi_turn.py, won 4 times in 11 by adding
    # 3 every turn), while 256 seeds tell 0.36 from 0.5 at 0.43 but for 1.4% of draws either way.
    max_common_answer_win_rate: float | None = 0.43
    common_answer_confirm_seeds: int = 240
    # The largest share of the trivial seeds a copy policy may win (None: off): one that answers the
    # same place of the first observation at every seed, its k-th number or its k-th word (the first 16
    # of each, and the last 16). A question whose answer is printed in it ("The {a} beats the {b}." -> a)
    # is won every time by copying its second word: the random answers, one candidate of some twenty,
    # let it through, and an agent trained on it learns to copy (experiments/results/cpu-curriculum,
    # spade-no-designer-training seed 1). Over the cap at the trivial seeds, the policy plays
    # trivial_confirm_seeds more and the rate over all of them decides.
    max_copy_win_rate: float | None = 0.75
    # Refuse a design whose first observation does not determine what wins (False: off): two
    # of the trivial and answer seeds that show the same first observation, whose solutions begin with
    # different actions, each play the other's first action; when both episodes end there unwon, the
    # answer was drawn apart from what the task states (``return question, rng.randint(2, 10)``), and any
    # constant wins it 1 time in 9, under the common-answer cap (experiments/results/cpu-curriculum,
    # spade-caps seed 1, whose agent came to answer 2 to every held-out question).
    refuse_undetermined_answers: bool = True
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
        if self.seeds < 1 or self.instances < 1 or self.trivial_seeds < 0 or self.answer_seeds < 0:
            raise ValueError(
                f"seeds and instances must be at least 1, trivial_seeds and answer_seeds at least 0, got "
                f"seeds={self.seeds}, instances={self.instances}, trivial_seeds={self.trivial_seeds}, "
                f"answer_seeds={self.answer_seeds}"
            )
        seed = self.seed
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31
        ):
            raise ValueError(
                f"seed must be None (drawn for each validation) or a whole number in [0, 2**31), got {seed!r}"
            )
        for name in (
            "answer_space_constants",
            "shaped_guesses",
            "trivial_confirm_seeds",
            "common_answer_confirm_seeds",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1024:
                raise ValueError(f"{name} must be a whole number from 0 (off) to 1024, got {value!r}")
        stacked = self.stacked_instances
        if stacked is not None and (isinstance(stacked, bool) or not isinstance(stacked, int) or stacked < 0):
            raise ValueError(f"stacked_instances must be None or a whole number >= 0, got {stacked!r}")
        for name in ("max_trivial_win_rate", "max_answer_replay_win_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if not isinstance(self.refuse_undetermined_answers, bool):
            raise ValueError(
                f"refuse_undetermined_answers must be true or false, got {self.refuse_undetermined_answers!r}"
            )
        for name in ("max_common_answer_win_rate", "max_copy_win_rate", "max_trivial_mean_return"):
            cap = getattr(self, name)
            if cap is not None and (
                isinstance(cap, bool) or not isinstance(cap, int | float) or not 0.0 <= cap <= 1.0
            ):
                raise ValueError(f"{name} must be None (off) or a share in [0, 1], got {cap!r}")

    def allowed(self) -> frozenset[str]:
        base = (
            self.allowed_imports if self.allowed_imports is not None else frozenset(sys.stdlib_module_names)
        )
        return base | frozenset(self.extra_imports)


class Failed(Exception):
    """A check of the battery failed: ``reason`` is its code (one of ``REASONS``), the message says why.
    Raised and caught inside the battery only; ``validate_source`` turns it into the report."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
