"""Turn an environment's source text into its class.

``load_env_class`` executes the source. Call it only where executing the source is safe: inside a
sandbox worker (:mod:`spade_rl.sandbox.worker`) for anything generated, or on the hand-written
reference environments. ``find_env_classes`` only parses, and is safe anywhere.
"""

from __future__ import annotations

import ast
import types

from spade_rl.envs.contract import ENV_CLASS_SUFFIX, ContractViolation


def find_env_classes(source: str) -> list[str]:
    """Names of the top-level classes whose name ends in ``Env`` (parses, never executes).

    Raises ``ContractViolation("syntax_error", ...)`` when the source does not parse.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
        raise ContractViolation("syntax_error", f"the environment does not parse: {exc}") from None
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name.endswith(ENV_CLASS_SUFFIX)
    ]


def load_env_class(source: str, module_name: str = "spade_env") -> type:
    """Execute ``source`` as a fresh module and return its one ``*Env`` class.

    Raises ``ContractViolation`` with reason ``syntax_error``, ``no_env_class`` or
    ``multiple_env_classes``; any exception raised by the module body propagates unchanged.
    """
    names = find_env_classes(source)
    if not names:
        raise ContractViolation(
            "no_env_class", f"the source defines no top-level class whose name ends in {ENV_CLASS_SUFFIX!r}"
        )
    if len(names) > 1:
        raise ContractViolation(
            "multiple_env_classes",
            f"the source must define exactly one *{ENV_CLASS_SUFFIX} class, "
            f"found {len(names)}: {', '.join(names)}",
        )
    module = types.ModuleType(module_name)
    code = compile(source, f"<{module_name}>", "exec")
    exec(code, module.__dict__)  # noqa: S102 - see the module docstring: callers run this sandboxed
    cls = module.__dict__.get(names[0])
    if not isinstance(cls, type):
        raise ContractViolation("no_env_class", f"{names[0]} is not a class after the module ran")
    return cls
