"""Environments: the contract, the loader, and the hand-written reference environments."""

from spade_rl.envs.contract import (
    ContractViolation,
    Environment,
    StepResult,
    check_reset_value,
    check_solution_value,
    check_step_value,
)
from spade_rl.envs.loader import find_env_classes, load_env_class

__all__ = [
    "ContractViolation",
    "Environment",
    "StepResult",
    "check_reset_value",
    "check_solution_value",
    "check_step_value",
    "find_env_classes",
    "load_env_class",
]
