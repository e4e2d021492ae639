"""The static checks of the validation battery (nothing runs: the source is only parsed) and the
constructor arguments an environment is validated and played with.

``static_checks`` gives ``no_env_class``, ``multiple_env_classes`` and ``disallowed_import`` (the
loader's ``syntax_error`` too); ``constructor_kwargs`` and ``play_kwargs`` are what validation, the
loop, the command line and the suites pass to an environment's constructor.
"""

from __future__ import annotations

import ast

from spade_rl.design.report import Failed, ValidationSettings
from spade_rl.envs.contract import ContractViolation
from spade_rl.envs.loader import find_env_classes


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
    """Returns the class name and whether it takes ``max_turns``; raises ``Failed``."""
    try:
        names = find_env_classes(source)
    except ContractViolation as exc:
        raise Failed(exc.reason, str(exc)) from None
    if len(names) != 1:
        reason = "no_env_class" if not names else "multiple_env_classes"
        raise Failed(reason, f"expected exactly one top-level *Env class, found {names or 'none'}")
    tree = ast.parse(source)
    allowed = settings.allowed()
    bad = sorted({name for name in imported_modules(tree) if name not in allowed})
    if bad:
        raise Failed(
            "disallowed_import",
            f"imports {', '.join(bad)}; allowed: the standard library"
            + (f" and {', '.join(settings.extra_imports)}" if settings.extra_imports else "")
            + " (relative imports are never allowed)",
        )
    return names[0], takes_max_turns(tree, names[0])
