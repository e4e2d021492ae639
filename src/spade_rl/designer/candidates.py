"""The warm-up's candidates: synthetic designs drawn, validated as the design phase validates them, measured
by the base agent's plays, and selected by difficulty (see :mod:`spade_rl.designer.warmup`).

    candidates = draw_candidates(config, design, corpus)
    kept, refused = playable_candidates(candidates, design, play, seed)
    measured = measure_candidates(policy, kept, play, config, seed)
    chosen = select_graded(measured, config.designs)
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from spade_rl.corpus import Corpus
from spade_rl.designer import prompts, synthetic
from spade_rl.designer.phase import DesignPhaseConfig
from spade_rl.designer.prompts import QUESTION_PREFIX, QUESTION_STOP, question_designer_chat
from spade_rl.envs import kits
from spade_rl.policy import Policy
from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes
from spade_rl.sandbox import Sandbox, SandboxConfig

MEASURE_BATCH = 32  # episodes played together while measuring the candidates


class WarmupError(ValueError):
    """A warm-up that cannot run with this policy or configuration; the message says what to change."""


@dataclass(frozen=True)
class WarmupConfig:
    designs: int = 0  # synthetic designs to learn from; 0: no warm-up
    epochs: int = 2
    learning_rate: float = 5e-5
    batch_size: int = 4  # designs per optimiser step (one sequence per forward pass)
    seed: int = 0
    cache: bool = True  # keep the warmed-up weights in the cache folder, and use them when found
    # Memory, not results: a row longer than this many tokens recomputes the activations of a share of its
    # layers in the backward pass (activation checkpointing) instead of holding them, the share that keeps
    # about this many tokens' worth: ceil(layers * (1 - activation_tokens / length)). 0: every row holds all.
    activation_tokens: int = 0
    # Graded designs (issue 40): plays of each candidate design by the base agent, without the hint, at
    # distinct seeds, before training (0: none: the designs are not measured, all of them are learned);
    # and how many candidates are drawn and measured per design kept.
    measure_plays: int = 0
    candidates_per_design: int = 3

    def __post_init__(self) -> None:
        for name, least in (("measure_plays", 0), ("candidates_per_design", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"warmup.{name} must be a whole number >= {least}, got {value!r}")
        if self.designs < 0 or self.epochs < 1 or self.batch_size < 1 or self.seed < 0:
            raise ValueError(
                "warmup.designs must be >= 0 (0: off), warmup.epochs and warmup.batch_size >= 1, "
                f"warmup.seed >= 0; got {self.designs}, {self.epochs}, {self.batch_size}, {self.seed}"
            )
        if isinstance(self.activation_tokens, bool) or not isinstance(self.activation_tokens, int):
            raise ValueError(f"warmup.activation_tokens must be an int >= 0, got {self.activation_tokens!r}")
        if self.activation_tokens < 0:
            raise ValueError(
                f"warmup.activation_tokens must be >= 0 (0: no recomputation), got {self.activation_tokens}"
            )
        if not 0 < self.learning_rate < 1:
            raise ValueError(f"warmup.learning_rate must be in (0, 1), got {self.learning_rate}")

    @property
    def enabled(self) -> bool:
        return self.designs > 0


class WarmupPlay(NamedTuple):
    """How the warm-up's candidates are played when they are measured: the run's sandbox and rollout."""

    sandbox: SandboxConfig
    rollout: RolloutConfig


@dataclass(frozen=True)
class Candidate:
    """A synthetic design to measure: its skill, level, grounding document, code and hint, and the
    recipe it was rendered from (``recipe`` None: a design written elsewhere, which is never edited)."""

    skill: str
    level: str
    document: str
    title: str
    code: str
    hint: str
    recipe: synthetic.Recipe | None = None


def draw_candidates(config: WarmupConfig, design: DesignPhaseConfig, corpus: Corpus) -> list[Candidate]:
    """``candidates_per_design * designs`` synthetic designs, the levels in turn (easy, medium, hard, ...),
    skills and documents drawn from ``Random(seed, index)``."""
    out = []
    skills = design.skill_list
    for j in range(config.designs * config.candidates_per_design):
        rng = random.Random(f"spade-rl/warmup/{config.seed}/candidate/{j}")
        skill = skills[rng.randrange(len(skills))]
        document = corpus.sample(rng, 1)[0] if design.grounding else None
        text, title = (document.text, document.title or "") if document is not None else ("", "")
        recipe = synthetic.draw_recipe(rng, skill, text, synthetic.LEVELS[j % len(synthetic.LEVELS)])
        code, hint = synthetic.render(rng, recipe)
        out.append(Candidate(skill, recipe.level, text, title, code, hint, recipe))
    return out


def measure_candidates(
    policy: Policy,
    candidates: list[Candidate],
    plays: int,
    play: WarmupPlay,
    seed: int,
    kit_kwargs: dict | None = None,
) -> list[float]:
    """Each candidate's no-hint win rate over ``plays`` episodes at distinct seeds, played by ``policy``
    as ``play.rollout`` plays (the run's agent) in a sandbox of ``play.sandbox``, ``MEASURE_BATCH`` at a
    time, with the kit's constructor arguments ``kit_kwargs`` (``DesignPhaseConfig.question_kwargs``: the
    attempts the run's designs are validated and played with). An episode that fails (an environment
    error) counts as a loss."""
    rng = random.Random(f"spade-rl/warmup-measure/{seed}")
    specs = [
        EpisodeSpec(
            kits.compose("question", c.code),
            seed=rng.randrange(2**31),
            setting="games",
            env_kwargs={"max_turns": play.rollout.max_turns, **(kit_kwargs or {})},
            tag=j,
        )
        for j, c in enumerate(candidates)
        for _ in range(plays)
    ]
    wins = [0] * len(candidates)
    with Sandbox(play.sandbox) as sandbox:
        for start in range(0, len(specs), MEASURE_BATCH):
            chunk = specs[start : start + MEASURE_BATCH]
            for episode in run_episodes(policy, sandbox, chunk, play.rollout, seed=rng.randrange(2**31)):
                wins[episode.spec.tag] += int(episode.won)
    return [w / plays for w in wins]


@contextlib.contextmanager
def _validator(design: DesignPhaseConfig, play: WarmupPlay, seed: int) -> Iterator[Callable[..., Any]]:
    """A function (code, hint, key) -> the design phase's validation report of the design, in a sandbox
    of ``play.sandbox``: ``design.question_validation`` at ``play.rollout.max_turns`` (as
    ``RunConfig.design_phase`` derives it), its seeds drawn from ``seed`` and ``key`` (the warm-up is the
    same every time)."""
    from spade_rl.design.validate import validate_source

    settings = dataclasses.replace(design.question_validation, max_turns=play.rollout.max_turns)
    with Sandbox(play.sandbox) as sandbox:

        def report(code: str, hint: str, key: str):
            drawn = random.Random(f"spade-rl/warmup-validate/{seed}/{key}").randrange(2**31)
            source = kits.compose("question", code)
            return validate_source(sandbox, source, dataclasses.replace(settings, seed=drawn), hint)

        yield report


def playable_candidates(
    candidates: list[Candidate],
    design: DesignPhaseConfig,
    play: WarmupPlay,
    seed: int,
    messages: list[str] | None = None,
) -> tuple[list[Candidate], dict[str, int]]:
    """The candidates that the design phase's validation accepts with the run's attempts, and how many
    were refused for each reason (their messages appended to ``messages`` when given). With several
    attempts the trivial-policy search refuses a question whose answers are few (a choice of three, a sum
    of two small numbers): the warm-up teaches what the loop keeps. Validated one after another, each at
    seeds of its own drawn from ``seed``."""
    kept, refused = [], {}
    with _validator(design, play, seed) as validate:
        for j, c in enumerate(candidates):
            report = validate(c.code, c.hint, str(j))
            if report.valid:
                kept.append(c)
            else:
                refused[report.reason] = refused.get(report.reason, 0) + 1
                if messages is not None:
                    messages.append(report.message)
    return kept, refused


BANDS = ("frontier", "too_hard", "too_easy")  # the order in which select_graded takes them


def band_of(win_rate: float, frontier: tuple[float, float] = prompts.FRONTIER) -> str:
    """ "never_won" at 0, else the band of :func:`spade_rl.designer.prompts.difficulty` ("too_hard",
    "frontier", "too_easy")."""
    if win_rate == 0:
        return "never_won"
    return {"too hard": "too_hard", "at the frontier": "frontier", "too easy": "too_easy"}[
        prompts.difficulty(win_rate, frontier)
    ]


def select_graded(
    win_rates: list[float], n: int, frontier: tuple[float, float] = prompts.FRONTIER
) -> list[int]:
    """The indices of ``n`` candidates (all of them when there are fewer), a balanced mix by measured
    band: in turn one at the frontier, one too hard but won at least once, one too easy, each band in
    candidate order, a band that runs out skipped; candidates never won only after all the others.

    Win rates [0, 0.5, 0.9, 0.1, 0.6, 0], n 4: frontier 1, too hard 3, too easy 2, frontier 4 -> [1, 3, 2, 4].
    """
    queues: dict[str, list[int]] = {band: [] for band in (*BANDS, "never_won")}
    for i, rate in enumerate(win_rates):
        queues[band_of(rate, frontier)].append(i)
    chosen: list[int] = []
    while len(chosen) < min(n, len(win_rates)) and any(queues[band] for band in BANDS):
        for band in BANDS:
            if queues[band] and len(chosen) < n:
                chosen.append(queues[band].pop(0))
    chosen += queues["never_won"][: max(0, n - len(chosen))]
    return chosen


def graded_examples(
    config: WarmupConfig,
    design: DesignPhaseConfig,
    candidates: list[Candidate],
    win_rates: list[float],
    chosen: list[int],
) -> list[tuple[list[dict], str]]:
    """(designer chat, answer) pairs for the ``chosen`` candidates: the chat as the design phase writes it
    in the question form, showing half the time the kit's built-in example (not played: unlabelled) and
    otherwise another chosen candidate with its measured win rate and label; the answer is the candidate.
    With ``design.edit_share``, that share of them is instead the design phase's edit prompt
    (:func:`edit_example`) for a candidate that was won at least once."""
    examples = []
    for i in chosen:
        c = candidates[i]
        rng = random.Random(f"spade-rl/warmup/{config.seed}/shown/{i}")
        if design.edit_share > 0 and rng.random() < design.edit_share:
            edit = edit_example(
                c, win_rates[i], design, random.Random(f"spade-rl/warmup/{config.seed}/edit/{i}")
            )
            if edit is not None:
                examples.append(edit)
                continue
        others = [j for j in chosen if j != i]
        if not others or rng.random() < 0.5:
            shown, rate = kits.EXAMPLES[c.skill], None
        else:
            j = others[rng.randrange(len(others))]
            shown, rate = candidates[j].code, win_rates[j]
        chat = question_designer_chat(
            c.document, c.skill, shown, design.chat_prompt, c.title, win_rate=rate, **_attempts(design)
        )
        examples.append((chat, ("```python\n" + c.code).removeprefix(QUESTION_PREFIX) + QUESTION_STOP))
    return examples


def edit_example(
    parent: Candidate, win_rate: float, design: DesignPhaseConfig, rng: random.Random
) -> tuple[list[dict], str] | None:
    """The edit prompt of the design phase (:func:`spade_rl.designer.prompts.edit_chat`) for ``parent``,
    answered by its recipe one level harder when the agent won it at least as often as the frontier's
    middle, one level easier otherwise (the class renamed ``...HarderEnv`` or ``...EasierEnv``); None for a
    parent never won, one without a recipe, or one already at the last level in that direction."""
    if win_rate <= 0 or parent.recipe is None:
        return None
    direction = prompts.edit_direction(win_rate)
    level = synthetic.LEVELS.index(parent.level) + (1 if direction == "harder" else -1)
    if not 0 <= level < len(synthetic.LEVELS):
        return None
    shown = prompts.ShownExample(parent.code, parent.hint, parent.skill, win_rate, None, True)
    chat = prompts.edit_chat(shown, "question", design.chat_prompt, **_attempts(design))
    recipe = dataclasses.replace(parent.recipe, level=synthetic.LEVELS[level])
    code, _ = synthetic.render(rng, recipe, direction.capitalize())
    return chat, ("```python\n" + code).removeprefix(QUESTION_PREFIX) + QUESTION_STOP


def _attempts(design: DesignPhaseConfig) -> dict:
    """The attempts and feedback a question prompt states (``design.question_attempts``), as keywords."""
    return {"attempts": design.question_attempts, "feedback": design.question_feedback}
