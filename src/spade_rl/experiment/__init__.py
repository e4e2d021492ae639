"""Experiments: several arms (loop configurations), one seed set, one budget, compared on held-out suites.

    spade-rl experiment experiments/ci-tiny.toml --out runs/experiments/ci-tiny

    from spade_rl.experiment import load_experiment, run_experiment
    experiment = load_experiment("experiments/cpu-default.toml")
    outcome = run_experiment(experiment, Path("runs/experiments/cpu-default"), progress=print)

Baselines and ablations are not separate code: each arm is a configuration of the self-play loop
(``designer.source = "none"`` for the fixed pool, ``"frozen"`` for a fixed designer,
``design.memory = false``, ``design.grounding = false``, ``designer.train = false``,
``rewards.mode``, ``design.hint_mode``). The file format is in :mod:`.spec`, the run and its folder in
:mod:`.runner`, the comparison in :mod:`.compare`, the figure in :mod:`.figure`.
"""

from spade_rl.experiment.runner import Outcome, RunRecord, compare_finished, run_experiment
from spade_rl.experiment.spec import Arm, Budget, Experiment, ExperimentError, ScoreGroup, load_experiment

__all__ = [
    "Arm",
    "Budget",
    "Experiment",
    "ExperimentError",
    "Outcome",
    "RunRecord",
    "ScoreGroup",
    "compare_finished",
    "load_experiment",
    "run_experiment",
]
