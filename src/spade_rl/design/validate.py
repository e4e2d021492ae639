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
  maximum reward, on every seed validation plays (``seeds``: a first seed drawn in this process from a
  random source the environment cannot read, ``ValidationReport.seed``, then seeds derived from it, as
  training draws its own: an environment honest only at seeds it can name or compute fails);
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
  then instances are made one after another in that worker up to as many as training stacks on a
  warm worker before the sandbox retires it (``stacked_instances``, by default the sandbox's
  ``episodes_per_worker``), and those numbered by ``transcripts.probed_instances`` (each power of two
  and the number after it, and the last two) replay a solution and the malformed actions with the
  first instance's transcripts (catches a class-level instance counter that rigs the reward, one way
  or the other, from any count on);
- ``hint_leaks_answer``: the hint, when given, does not contain the final answer of any seed played
  (unless it is one answer at every seed that every first observation states: the tool kit's "done"
  of a stepped task is no secret);
- ``trivial_policy_wins``: the trivial-policy search (:mod:`spade_rl.design.trivial_search`), played
  as training plays, in a worker of its own that is never asked for a solution, one instance per
  episode: no policy of a fixed set of trivial ones (one short action repeated; answers drawn at
  random from the numbers and words of the first observation, in the format it asks for), no random
  answer of the solution's own shape, wins more than ``max_trivial_win_rate`` of its episodes at
  ``trivial_seeds`` seeds (15% by default, as the reference implementation refuses what random
  guessing wins), and no constant of the answer space the environment shows (its observations, hint,
  solutions' answers and source literals, neighbours of their numbers, negatives, the empty answer)
  wins more than ``max_answer_replay_win_rate`` of the seeds where the solution answers something
  else, and, with ``max_copy_win_rate`` set, no policy that answers one place of the first
  observation at every seed (its k-th number or word) wins more than that share of them (an answer
  printed in the question at one place); a malformed action that wins there is
  ``malformed_action_wins``;
- ``undetermined_answer``: with ``refuse_undetermined_answers`` set, no two of the trivial and answer
  seeds show the same first observation with solutions that begin differently, each other's first
  action ending both episodes unwon (the answer is drawn apart from what the task states);
- ``answer_replay_wins``: the cross-seed answer replay: the most common final answer of the solutions
  at ``answer_seeds`` seeds, played as a constant at the trivial policies' seeds (other seeds than
  those it came from), as training plays, wins at most ``max_answer_replay_win_rate`` of them (half by
  default: a task whose answer is the same word on most seeds is won without being read; a question
  of three options, whose constant wins a third, is left to the designer's reward);
- ``judge_rejected``: an optional judge (for example an LLM) accepts it; off by default;
- sandbox failures during any call: ``timeout``, ``crashed``, ``memory``, ``output_too_large``,
  ``protocol_error``, ``worker_lost``; ``validation_timeout`` when the whole battery runs past its
  budget.

Every environment is validated with the constructor arguments it will be played with
(``ValidationReport.env_kwargs``, recorded in the archive and used by every play). ``REASONS`` lists
every code; a report never carries another (a code from elsewhere would be a bug, reported as
``protocol_error``). The text checks (final answers, leaking hints, trivial policies' actions) are in
:mod:`spade_rl.design.answers`; the settings, the report and the codes in :mod:`spade_rl.design.report`;
the static checks and the constructor arguments in :mod:`spade_rl.design.static`; the handling of
answers, transcripts and seeds in :mod:`spade_rl.design.transcripts`. Their public names are importable
from here too.
"""

from __future__ import annotations

import random
import secrets
import time

from spade_rl.design import trivial_search
from spade_rl.design.answer_space import wrap_like
from spade_rl.design.answers import final_answer, leaked_answer
from spade_rl.design.report import (
    CHECKS,
    MALFORMED_ACTIONS,
    REASONS,
    Failed,
    Judge,
    ValidationReport,
    ValidationSettings,
)
from spade_rl.design.static import (
    constructor_kwargs,
    imported_modules,
    play_kwargs,
    static_checks,
    takes_max_turns,
)
from spade_rl.design.transcripts import (
    canonical,
    contract,
    derived_seeds,
    difference,
    ended,
    probed_instances,
    short,
    validation_seeds,
    value_of,
)
from spade_rl.design.undetermined import undetermined
from spade_rl.envs.contract import check_reset_value, check_solution_value, check_step_value
from spade_rl.sandbox import EnvHandle, Sandbox

RANDOM_PROBES = 24  # instance numbers drawn at random that replay a solution (see _Battery.stacked_instances)

__all__ = [
    "MALFORMED_ACTIONS",
    "REASONS",
    "Judge",
    "ValidationReport",
    "ValidationSettings",
    "constructor_kwargs",
    "derived_seeds",
    "imported_modules",
    "play_kwargs",
    "static_checks",
    "takes_max_turns",
    "validate_source",
    "validation_seeds",
]


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
        # The first seed played, and the root of the others: drawn here, in the trusted process, from a
        # source the environment cannot read, unless the settings give one (to replay a report)
        self.seed = settings.seed if settings.seed is not None else secrets.randbelow(2**31)
        self.report.seed = self.seed
        # Draws the environment must not be able to compute even from the seeds it is given (which
        # instances replay a solution, the words around the trivial policies' answers): from the
        # system's random source, apart from the seed (so a report's seed replays all but these).
        self.private = random.Random(secrets.randbelow(2**63))

    def derived(self, purpose: str, count: int) -> list[int]:
        """``count`` seeds for ``purpose``, drawn from ``self.seed`` (see ``transcripts.derived_seeds``)."""
        return derived_seeds(self.source, purpose, self.seed, count)

    def passed(self, check: str, since: float) -> None:
        if check not in CHECKS:  # a bug of ours: a name nobody downstream knows
            raise ValueError(f"unknown check {check!r}: name it in spade_rl.design.report.CHECKS")
        now = time.perf_counter()
        self.report.checks.append(check)
        self.report.timings[check] = now - since
        self.within_budget(f"after {check}")

    def within_budget(self, where: str) -> None:
        if time.perf_counter() - self.started > self.settings.total_timeout_s:
            raise Failed(
                "validation_timeout",
                f"validation took over its budget of {self.settings.total_timeout_s} s ({where})",
            )

    def open(self, kwargs: dict, fresh_worker: bool = False, beside: EnvHandle | None = None) -> EnvHandle:
        opened = self.sandbox.open(self.source, kwargs, self.settings.call_timeout_s, fresh_worker, beside)
        handle = value_of(opened, "open")
        self.handles.append(handle)
        return handle

    def discard(self, handle: EnvHandle) -> None:
        handle.close()
        self.handles.remove(handle)

    def reset(self, env: EnvHandle, seed: int) -> list:
        value = value_of(env.reset(seed, self.settings.call_timeout_s), "reset")
        contract(check_reset_value, value)
        return value

    def step(self, env: EnvHandle, action: str) -> list:
        value = value_of(env.step(action, self.settings.call_timeout_s), "step")
        contract(check_step_value, value, self.settings.reward_range)
        return value

    def solution(self, env: EnvHandle) -> list[str]:
        actions = contract(
            check_solution_value, value_of(env.solution(self.settings.call_timeout_s), "solution")
        )
        if len(actions) > self.settings.max_turns:
            raise Failed(
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
                if ended(transcript):
                    continue
                transcript.append(self.step(env, action))
        return transcripts

    def run(self) -> None:
        s, report = self.settings, self.report
        t = time.perf_counter()
        report.class_name, has_max_turns = static_checks(self.source, s)
        kwargs = {**({"max_turns": s.max_turns} if has_max_turns else {}), **s.env_kwargs}
        report.env_kwargs = dict(kwargs)
        seeds = validation_seeds(self.source, self.seed, s.seeds)
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
                raise Failed(
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
        malformed: dict[str, list] = {}
        for action in MALFORMED_ACTIONS:
            transcript = malformed[action] = self.play(env, seeds[0], [action])
            if self.won(transcript[-1]):
                raise Failed("malformed_action_wins", f"the malformed action {action!r} wins the episode")
        self.passed("malformed_actions", t)

        t = time.perf_counter()
        self.reset(env, seeds[0])
        for _ in range(s.max_turns):
            result = self.step(env, MALFORMED_ACTIONS[1])
            if result[2] or result[3]:
                if self.won(result):
                    raise Failed("malformed_action_wins", "repeating a malformed action wins the episode")
                break
        else:
            raise Failed("never_terminates", f"{s.max_turns} malformed actions did not end the episode")
        self.passed("terminates", t)

        if s.check_determinism:
            t = time.perf_counter()
            fresh = self.open(kwargs, fresh_worker=True)
            for seed in seeds:
                where = difference(self.play(fresh, seed, solutions[seed]), transcripts[seed])
                if where is not None:
                    raise Failed(
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
                    where = difference(transcript, transcripts[seed])
                    if where is not None:
                        raise Failed(
                            "instance_dependent",
                            f"instance {number + 1} of {s.instances} in one worker, played interleaved with "
                            f"the others, differs from the first play of seed {seed} at {where}",
                        )
            self.passed("instances", t)

        if self.stack_depth() > s.instances:
            t = time.perf_counter()
            replays = {seed: (solutions[seed], transcripts[seed]) for seed in seeds}
            probes = dict(malformed)
            final = solutions[seeds[0]][-1] if solutions[seeds[0]] else ""
            for answer in ("0", "1"):  # well-formed answers (wrong ones, mostly): a rig that pays any
                action = wrap_like(final) % answer
                if action != final:
                    probes[action] = self.play(env, seeds[0], [action])
            self.stacked_instances(env, kwargs, replays, seeds[0], probes)
            self.passed("stacked_instances", t)

        if self.hint:
            t = time.perf_counter()
            # One answer at every seed that the task itself states is no secret (a tool kit's "done").
            public = len({final_answer(solutions[seed][-1]) for seed in seeds}) == 1 and all(
                leaked_answer(transcripts[seed][0][0], solutions[seed][-1]) for seed in seeds
            )
            for seed in seeds:
                leaked = "" if public else leaked_answer(self.hint, solutions[seed][-1])
                if leaked:
                    raise Failed(
                        "hint_leaks_answer", f"the hint contains the final answer {leaked!r} of seed {seed}"
                    )
            self.passed("hint_no_leak", t)

        if s.trivial_seeds:
            t = time.perf_counter()
            space = trivial_search.answer_space(self, env)
            play = trivial_search.TrainingPlay(self, kwargs)
            trivial_search.search(self, play, space)
            trivial_search.copy_search(self, play, space)
            if s.refuse_undetermined_answers:
                undetermined(self, play, space)
            self.passed("trivial_policies", t)
            if s.answer_seeds:
                t = time.perf_counter()
                trivial_search.answer_replay(self, play, space)
                self.passed("answer_replay", t)

        if s.judge is not None:
            t = time.perf_counter()
            accepted, why = s.judge(self.source, self.hint)
            if not accepted:
                raise Failed("judge_rejected", f"the judge rejected it: {why}")
            self.passed("judge", t)
        report.valid = True

    def reset_gate(self, env: EnvHandle) -> None:
        """Reset with ``reset_gate_seeds`` more seeds: each answers a well-typed observation; not every
        one the same instance; not every one with a step whose check raises at the start."""
        s = self.settings
        seeds = self.derived("reset_gate", s.reset_gate_seeds)
        instances, raising = set(), []
        for seed in seeds:
            observation, info = self.reset(env, seed)
            instances.add(canonical([observation, self.solution(env)]))
            steps = info.get("unevaluable_steps")
            raising.append(steps if isinstance(steps, list) and steps else None)
        if len(seeds) > 1 and len(instances) == 1:
            raise Failed(
                "same_instance_every_seed",
                f"reset() with {len(seeds)} different seeds gave the same first observation and the same "
                "solution() every time: draw the instance from random.Random(seed)",
            )
        if all(raising):
            raise Failed(
                "step_check_raises",
                f"the check of step {short(raising[0])} raises on the initial state at every one of "
                f"{len(seeds)} seeds (the reset gate): it can never be met; make the check read only "
                "what make() set up",
            )

    def stack_depth(self) -> int:
        """Instances the stacked-instance check fills one worker with (see ``stacked_instances``)."""
        depth = self.settings.stacked_instances
        return self.sandbox.config.episodes_per_worker if depth is None else depth

    def stacked_instances(
        self,
        env: EnvHandle,
        kwargs: dict,
        replays: dict[int, tuple[list[str], list]],
        probe_seed: int,
        probes: dict[str, list],
    ) -> None:
        """Instances made one after another in the worker of ``env``, up to ``stack_depth`` (by default
        as many as training stacks on a warm worker before the sandbox retires it), so that a class
        attribute counting instances sees every count training will show it. Those numbered by
        ``probed_instances``, and ``RANDOM_PROBES`` numbers drawn from a source the environment cannot
        read (``secrets``, not the battery's seed, which its first reset is given), replay a seed's
        solution (``replays``: seed -> (actions, the first instance's transcript)) and one of ``probes``
        (an action -> the first instance's transcript of it at ``probe_seed``: the malformed actions and
        well-formed answers) drawn at random; every other one, drawn with probability a half, plays a
        well-formed answer. Each must give the first instance's transcripts (``instance_dependent``): a
        counter that makes any answer win at counts a fixed list never looks at (one in 16 of them, say)
        is met at one of them but about once in 65,000 validations. (Every probe at every instance cost a
        20 ms reset's environment 9 s of validation.)"""
        depth = self.stack_depth()
        first = env.worker_instances + 1
        drawn = self.private
        probed = set(probed_instances(first, depth))
        if depth >= first:
            probed |= set(drawn.sample(range(first, depth + 1), min(RANDOM_PROBES, depth - first + 1)))
        seeds = list(replays)
        answers = [a for a in probes if a not in MALFORMED_ACTIONS] or list(probes)
        while env.worker_instances < depth:
            other = self.open(kwargs, beside=env)
            number = env.worker_instances
            plays = []
            if number in probed:
                seed = seeds[number % len(seeds)]
                plays.append((seed, *replays[seed], "solution()"))
                chosen = [drawn.choice(list(probes))]
            else:  # half the others, a well-formed answer: it wins where any answer is made to win
                chosen = [drawn.choice(answers)] if drawn.random() < 0.5 else []
            for a in chosen:
                kind = "malformed action" if a in MALFORMED_ACTIONS else "answer"
                plays.append((probe_seed, [a], probes[a], f"the {kind} {a!r}"))
            for seed, actions, expected, what in plays:
                where = difference(self.play(other, seed, actions), expected)
                if where is not None:
                    raise Failed(
                        "instance_dependent",
                        f"instance {number} made in one worker (training stacks up to {depth} on a warm "
                        f"worker) differs from the first one playing {what} at seed {seed}, at {where}",
                    )
            self.discard(other)
            self.within_budget(f"in stacked_instances, at instance {number}")


def validate_source(
    sandbox: Sandbox, source: str, settings: ValidationSettings | None = None, hint: str = ""
) -> ValidationReport:
    """Run the battery on ``source`` (and ``hint``); never raises for anything the environment does."""
    battery = _Battery(sandbox, source, hint, settings or ValidationSettings())
    try:
        battery.run()
    except Failed as exc:
        battery.report.reason, battery.report.message = exc.reason, str(exc)
    finally:
        for handle in battery.handles:
            handle.close()
        battery.report.seconds = time.perf_counter() - battery.started
    if battery.report.reason not in REASONS:  # a bug of ours: a code nobody downstream knows
        battery.report.message = f"unknown reason code {battery.report.reason!r}: {battery.report.message}"
        battery.report.reason = "protocol_error"
    return battery.report
