"""The designer's supervised warm-up: teach a small model the "question" form before self-play starts.

    metrics = warm_up(policy, WarmupConfig(designs=48), design_config, corpus)

Measured on SmolLM2-135M (``python bench/learning_signal.py``): by prompting alone it writes no valid
design, whole module or ``QuestionTask`` subclass. The warm-up fine-tunes the policy on ``designs``
designer prompts of the run's own form (corpus document, skill, one example design, exactly as the
design phase builds them), each answered by a synthetic design (:mod:`spade_rl.designer.synthetic`)
about that document: cross-entropy on the answer tokens only, AdamW, ``epochs`` passes. The answer
starts after the forced opening of the block (``designer.prompts.QUESTION_PREFIX``), as the design
phase's generations do.

Graded designs (``measure_plays`` > 0, issue 40): the synthetic designs come at three levels of
difficulty (:data:`spade_rl.designer.synthetic.LEVELS`), and the warm-up first measures what the base agent
makes of them: ``candidates_per_design * designs`` candidates (levels in turn), each played
``measure_plays`` times without the hint at distinct seeds by the policy as the run's agent plays
(``rollout``, in the run's ``sandbox``), before any training. It keeps ``designs`` of them, taking in
turn one at the frontier, one too hard (won at least once), one too easy (:func:`select_graded`), and
designs the agent never won only when the others run out; each prompt shows another kept candidate with
its measured win rate and label, as the design phase shows its memory (or, half the time, the kit's
example, unlabelled). With ``design.edit_share``, that share of the kept candidates that were won is
taught as the design phase's edit prompt instead, answered by the same recipe one level harder (won at
least as often as the frontier's middle) or easier. So the designer learns the form on designs that
span what the agent can win, not only on ones it never wins. What was measured and kept is in the cache
entry's ``designs.json`` and the ``warmup/kept_*`` metrics.

Several attempts (``design.question_attempts`` > 1): every prompt states them as the design phase's do,
and the synthetic designs are validated as the design phase validates designs, with the run's sandbox
and turn limit (``play``): those refused (``warmup/refused``; with several answers the trivial-policy
search refuses questions of few possible answers, a choice of three or a sum of two small numbers) are
neither measured nor taught, the unmeasured warm-up drawing on until it has ``designs`` (at most
``MAX_DRAWS`` draws each); the graded warm-up plays the others with the same attempts and feedback.

The result is cached (``$SPADE_RL_CACHE/warmup/<key>/``, written whole or not at all): the key covers
the model's weights, this configuration, the design form and prompt settings, the corpus settings,
the rollout settings when designs are measured, and the source of the kit, the prompts and the synthetic
designs, so that anything that changes what
would be learned gives a new entry, and the same entry is found again on the next run and on resume
(where LoRA needs the warmed-up base weights before its adapter is loaded). ``designs = 0`` (the
default, and the paper's setting) turns it off.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from spade_rl.corpus import Corpus, CorpusConfig
from spade_rl.designer import prompts, synthetic
from spade_rl.designer.candidates import (
    BANDS,
    MEASURE_BATCH,
    Candidate,
    WarmupConfig,
    WarmupError,
    WarmupPlay,
    _attempts,
    _validator,
    band_of,
    draw_candidates,
    edit_example,
    graded_examples,
    measure_candidates,
    playable_candidates,
    select_graded,
)
from spade_rl.designer.phase import DesignPhaseConfig
from spade_rl.designer.prompts import QUESTION_PREFIX, QUESTION_STOP, question_designer_chat
from spade_rl.envs import kits
from spade_rl.memory import release_unused_memory
from spade_rl.policy import Policy
from spade_rl.policy.thinking import thinking_flag

__all__ = [  # the warm-up, and the names of its candidates (designer/candidates.py) it always had
    "BANDS",
    "MEASURE_BATCH",
    "Candidate",
    "WarmupConfig",
    "WarmupError",
    "WarmupPlay",
    "band_of",
    "cache_key",
    "draw_candidates",
    "edit_example",
    "graded_examples",
    "measure_candidates",
    "playable_candidates",
    "select_graded",
    "warm_up",
    "warmup_examples",
]

log = logging.getLogger(__name__)

# Bump when the training procedure changes what a cache entry holds (2: the learner's SFT step; 3: graded
# synthetic designs, measured and selected when measure_plays > 0, and labelled examples).
FORMAT = 3


def warmup_examples(
    config: WarmupConfig, design: DesignPhaseConfig, corpus: Corpus, play: WarmupPlay | None = None
) -> list[tuple[list[dict], str]]:
    """(designer chat, answer) pairs: the chat as the design phase writes it, with an example design
    that is the kit's built-in one or (half the time, as the memory would show) another synthetic
    design; the answer is a synthetic design after the forced opening, closed by the end of the block.
    With several attempts (``design.question_attempts`` > 1) and ``play`` given, only designs that the
    design phase's validation accepts with them are answers (the draws go on past those it refuses)."""
    return _examples(config, design, corpus, play)[0]


MAX_DRAWS = 8  # draws per example the unmeasured warm-up makes at most, looking for valid designs


def _examples(
    config: WarmupConfig, design: DesignPhaseConfig, corpus: Corpus, play: WarmupPlay | None
) -> tuple[list[tuple[list[dict], str]], dict[str, int]]:
    """:func:`warmup_examples`, and how many drawn designs validation refused for each reason."""
    with contextlib.ExitStack() as stack:
        validate = None
        if design.question_attempts > 1 and play is not None:
            validate = stack.enter_context(_validator(design, play, config.seed))
        examples, refused = [], {}
        draws = config.designs if validate is None else MAX_DRAWS * config.designs
        for i in range(draws):
            if len(examples) == config.designs:
                break
            example, reason = _example(config, design, corpus, i, validate)
            if reason == "ok":
                examples.append(example)
            else:
                refused[reason] = refused.get(reason, 0) + 1
    if len(examples) < config.designs:
        raise WarmupError(
            f"validation with design.question_attempts = {design.question_attempts} refused "
            f"{sum(refused.values())} of {draws} synthetic designs ({refused}), leaving {len(examples)} "
            f"of warmup.designs = {config.designs}: lower question_attempts or warmup.designs"
        )
    return examples, refused


def _example(
    config: WarmupConfig,
    design: DesignPhaseConfig,
    corpus: Corpus,
    i: int,
    validate: Callable[..., Any] | None,
) -> tuple[tuple[list[dict], str], str]:
    """The ``i``-th example of the unmeasured warm-up, and the reason validation gives its design (``ok``
    without ``validate``)."""
    skills = design.skill_list
    rng = random.Random(f"spade-rl/warmup/{config.seed}/{i}")
    skill = skills[rng.randrange(len(skills))]
    document = corpus.sample(rng, 1)[0] if design.grounding else None
    text, title = (document.text, document.title or "") if document is not None else ("", "")
    if rng.random() < 0.5:
        shown = kits.EXAMPLES[skill]
    else:
        other = corpus.sample(rng, 1)[0].text if design.grounding else ""
        shown = synthetic.synthetic_design(rng, skill, other)[0]
    chat = question_designer_chat(text, skill, shown, design.chat_prompt, title, **_attempts(design))
    code, hint = synthetic.synthetic_design(rng, skill, text)
    answer = ("```python\n" + code).removeprefix(QUESTION_PREFIX) + QUESTION_STOP
    return (chat, answer), "ok" if validate is None else validate(code, hint, f"example/{i}").reason


def cache_key(
    policy: Policy,
    config: WarmupConfig,
    design: DesignPhaseConfig,
    corpus: CorpusConfig,
    play: WarmupPlay | None = None,
) -> str:
    """What the warm-up's result depends on, hashed (how candidates are played when they are measured)."""
    digest = hashlib.sha256()
    settings = {
        "format": FORMAT,
        # (activation_tokens changes where the activations are, not the weights: outside the key)
        "warmup": {k: v for k, v in asdict(config).items() if k not in ("cache", "activation_tokens")},
        "design": {
            "form": design.form,
            "skills": list(design.skill_list),
            "grounding": design.grounding,
            "max_document_words": design.prompt.max_document_words,
            # the rendered prompts differ with the switch set (unset: the key of earlier releases)
            **({"thinking": design.thinking} if design.thinking != "template" else {}),
            # the prompts state the attempts and the measurement plays them (1: the key of earlier releases)
            **(
                {"question_attempts": design.question_attempts, "question_feedback": design.question_feedback}
                if design.question_attempts > 1
                else {}
            ),
        },
        "corpus": repr(corpus),
        **({"rollout": repr(play.rollout)} if config.measure_plays and play is not None else {}),
        # several attempts: validation with them chooses what is taught (its settings, its turn limit)
        **(
            {
                "validation": repr(design.validation),
                "validated": play is not None,
                **({"rollout": repr(play.rollout)} if play is not None else {}),
            }
            if design.question_attempts > 1
            else {}
        ),
        # the graded warm-up teaches the edit prompt in this share of its examples
        **({"edit_share": design.edit_share} if config.measure_plays and design.edit_share else {}),
    }
    digest.update(json.dumps(settings, sort_keys=True, default=repr).encode())
    for module in (synthetic, prompts):
        digest.update(Path(module.__file__).read_bytes())
    digest.update(kits.source("question").encode())
    for name, tensor in sorted(policy.model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().flatten()[:256].cpu().numpy().tobytes())
    return digest.hexdigest()[:20]


def warm_up(
    policy: Policy,
    config: WarmupConfig,
    design: DesignPhaseConfig,
    corpus: Corpus,
    play: WarmupPlay | None = None,
) -> dict:
    """Warm the policy up in place (from the cache when the same warm-up was done before); returns
    ``warmup/*`` metrics (``cached``, ``seconds``, ``loss_first``, ``loss_last``, ``designs``; with
    ``measure_plays``, the candidates measured and how many of each band were kept). ``play``: how
    candidates are played, needed when ``config.measure_plays`` > 0."""
    if not config.enabled:
        return {}
    if config.measure_plays and play is None:
        raise WarmupError(
            "warmup.measure_plays > 0 measures the synthetic designs with the base agent, which needs the "
            "run's sandbox and rollout settings (warm_up(..., play=WarmupPlay(sandbox, rollout)))"
        )
    from spade_rl.policy.models import cache_root
    from spade_rl.policy.transformers_backend import TransformersPolicy

    if not isinstance(policy, TransformersPolicy):
        raise WarmupError(
            f"the warm-up trains an in-process transformers policy, not a {type(policy).__name__}; "
            "set warmup.designs = 0, or use policy.backend = 'transformers'"
        )
    if design.form != "question":
        raise WarmupError(
            f"the warm-up teaches the 'question' design form; design.form is {design.form!r} "
            "(set warmup.designs = 0 or design.form = 'question')"
        )
    started = time.perf_counter()
    folder = cache_root() / "warmup" / cache_key(policy, config, design, corpus.config, play)
    weights = folder / "model.safetensors"
    policy.clear_prefix_cache()  # whatever it held was computed with the weights about to change
    if config.cache and weights.exists():
        _load(policy, weights)
        stats = json.loads((folder / "stats.json").read_text())
        log.info("warm-up loaded from %s", folder)
        return {**stats, "warmup/cached": 1.0, "warmup/seconds": time.perf_counter() - started}
    # The designer's prompts as the design phase renders them (its thinking switch included).
    thinking = thinking_flag(policy, design.thinking, key="design.thinking")
    graded: dict = {}
    if config.measure_plays and play is not None:
        examples, graded, kept = _graded(policy, config, design, corpus, play)
        policy.clear_prefix_cache()  # the measurement's prompts, with the weights about to change
    else:
        examples, refused = _examples(config, design, corpus, play)
        kept = []
        if design.question_attempts > 1 and play is not None:
            graded = {"warmup/refused": float(sum(refused.values()))}
    losses = _train(policy, examples, config, thinking)
    stats = {
        **graded,
        "warmup/designs": float(len(examples)),
        "warmup/loss_first": losses[0],
        "warmup/loss_last": losses[-1],
        "warmup/train_seconds": time.perf_counter() - started,
    }
    if config.cache:
        _save(policy, folder, stats, kept)
    log.info("warm-up: %d designs, loss %.3f -> %.3f", len(examples), losses[0], losses[-1])
    return {**stats, "warmup/cached": 0.0, "warmup/seconds": time.perf_counter() - started}


def _graded(
    policy: Policy, config: WarmupConfig, design: DesignPhaseConfig, corpus: Corpus, play: WarmupPlay
) -> tuple[list[tuple[list[dict], str]], dict, list[dict]]:
    """Measure the candidates, keep a graded mix: the examples, their ``warmup/*`` metrics, and one row
    per candidate (skill, level, win rate, band, kept) for ``designs.json``."""
    started = time.perf_counter()
    candidates = draw_candidates(config, design, corpus)
    refused: dict[str, int] = {}
    if (
        design.question_attempts > 1
    ):  # one attempt: every synthetic design is valid (tests/designer/test_warmup.py)
        drawn = len(candidates)
        candidates, refused = playable_candidates(candidates, design, play, config.seed)
        log.info(
            "warm-up: %d of %d candidates refused by validation: %s", drawn - len(candidates), drawn, refused
        )
        if not candidates:
            raise WarmupError(
                f"validation with design.question_attempts = {design.question_attempts} refused all {drawn} "
                f"synthetic candidates ({refused}): lower question_attempts or raise candidates_per_design"
            )
    rates = measure_candidates(
        policy, candidates, config.measure_plays, play, config.seed, design.question_kwargs
    )
    chosen = select_graded(rates, config.designs)
    bands = [band_of(r) for r in rates]
    metrics = {
        "warmup/candidates": float(len(candidates)),
        **({"warmup/refused": float(sum(refused.values()))} if design.question_attempts > 1 else {}),
        "warmup/measure_seconds": time.perf_counter() - started,
        "warmup/candidate_win_rate": sum(rates) / len(rates),
        "warmup/kept_win_rate": sum(rates[i] for i in chosen) / len(chosen),
    }
    for band in (*BANDS, "never_won"):
        metrics[f"warmup/measured_{band}"] = float(bands.count(band))
        metrics[f"warmup/kept_{band}"] = float(sum(bands[i] == band for i in chosen))
    for level in synthetic.LEVELS:
        rated = [r for r, c in zip(rates, candidates, strict=True) if c.level == level]
        metrics[f"warmup/win_rate_{level}"] = sum(rated) / len(rated) if rated else 0.0
    rows = [
        {"skill": c.skill, "level": c.level, "win_rate": r, "band": b, "kept": i in chosen, "code": c.code}
        for i, (c, r, b) in enumerate(zip(candidates, rates, bands, strict=True))
    ]
    log.info(
        "warm-up: %d candidates measured (%d plays each): %s; kept %d",
        len(candidates),
        config.measure_plays,
        ", ".join(f"{b} {bands.count(b)}" for b in (*BANDS, "never_won")),
        len(chosen),
    )
    return graded_examples(config, design, candidates, rates, chosen), metrics, rows


def _train(
    policy, examples: list[tuple[list[dict], str]], config: WarmupConfig, thinking: bool | None = None
) -> list[float]:
    """Cross-entropy on the answer tokens, one sequence per pass, a step every ``batch_size``, through the
    learner's supervised step (:meth:`spade_rl.train.learner.Learner.sft_step`: the model call and the
    optimiser step of self-play's update; AdamW without weight decay or clipping); the mean loss of each
    step. Only the answer's positions go through the output head (the prompt is five sixths of a row).
    The allocator's free pages go back to the system at the end: what the warm-up freed would otherwise
    stay in the process for the rest of the run, under the play and the update's own memory.

    With ``activation_tokens``, each row longer than it recomputes the activations of
    :func:`spade_rl.train.learner.checkpointed_layers` of its decoder layers in the backward pass; the
    weights come out the same.
    On the default model a 640-token row holds about 1.4 GB of activations; the warm-up's peak on its 24
    longest rows (567-642 tokens) was 4221 MiB holding them all and 3630 MiB with 320, for about a tenth
    more time (``python bench/warmup_memory.py``)."""
    from spade_rl.train import TrainConfig
    from spade_rl.train.learner import Learner

    tokenizer = policy.tokenizer
    if config.activation_tokens and not getattr(policy.model, "supports_gradient_checkpointing", False):
        raise WarmupError(
            "warmup.activation_tokens needs activation checkpointing, which "
            f"{type(policy.model).__name__} does not support; set warmup.activation_tokens = 0"
        )
    rows = []
    for chat, answer in examples:
        prompt = policy.render(chat, add_generation_prompt=True, thinking=thinking)
        prompt += tokenizer(QUESTION_PREFIX, add_special_tokens=False)["input_ids"]
        target = tokenizer(answer, add_special_tokens=False)["input_ids"]
        rows.append((prompt, target))
    settings = TrainConfig(
        learning_rate=config.learning_rate,
        weight_decay=0.0,
        max_grad_norm=0.0,  # no clipping
        group_size=2,  # (GRPO's; the supervised step has no groups)
        per_device_train_batch_size=1,
        gradient_accumulation_steps=max(2, config.batch_size),
        bf16=False,
        gradient_checkpointing=False,
        checkpoint_rows_longer_than=config.activation_tokens,
        seed=config.seed,
    )
    learner = Learner(policy.model, tokenizer, settings)
    order = random.Random(f"spade-rl/warmup-order/{config.seed}")
    losses = []
    try:
        for _ in range(config.epochs):
            indices = list(range(len(rows)))
            order.shuffle(indices)
            for start in range(0, len(indices), config.batch_size):
                batch = [rows[i] for i in indices[start : start + config.batch_size]]
                losses.append(learner.sft_step(batch, graduated=True))
    finally:
        learner.close()  # the model as it came: no checkpointing hooks, eval mode
        del learner
        gc.collect()
        release_unused_memory()
    return losses


def _save(policy, folder: Path, stats: dict, designs: list[dict] = ()) -> None:
    from safetensors.torch import save_model

    partial = folder.with_name(folder.name + f".partial-{time.time_ns()}")
    partial.mkdir(parents=True)
    try:
        save_model(policy.model, str(partial / "model.safetensors"))  # tied weights stored once
        (partial / "stats.json").write_text(json.dumps(stats))
        if designs:  # the measured candidates: what the graded warm-up kept and why
            (partial / "designs.json").write_text(json.dumps(designs, indent=1))
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)  # whole or not at all
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _load(policy, weights: Path) -> None:
    from safetensors.torch import load_model

    device = str(next(policy.model.parameters()).device)
    try:
        load_model(policy.model, str(weights), strict=True, device=device)
    except (RuntimeError, OSError, ValueError) as exc:
        raise WarmupError(f"the cached warm-up {weights} cannot be loaded into this model: {exc}") from None
