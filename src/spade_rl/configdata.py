"""Dataclasses from plain data (TOML tables, JSON, ``key=value`` overrides) and back, with every key and
value checked: what is unknown, of the wrong type or impossible is a :class:`ConfigError` that names the
key and what is allowed. Generic: :mod:`spade_rl.loop.config` applies it to the run's configuration.

    config = build(RunConfig, {"loop": {"iterations": 2}}, "")   # a partial table keeps the defaults
    data = merge_tables(profile, file, RunConfig)                 # layers of data, the later winning
    data = to_data(config)                                        # plain data, as config.json holds it
    key, value = parse_override("loop.iterations=5")              # a TOML value after the "="
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from dataclasses import fields, is_dataclass
from typing import Any


class ConfigError(ValueError):
    """A configuration that cannot run: the message names the key and what is allowed."""


def build(cls: type, data: Any, where: str) -> Any:
    """An instance of dataclass ``cls`` from a mapping, checking keys and value types recursively.
    ``where`` is the dotted path of the table ("" for the top level), used in messages."""
    table = f"[{where}]" if where else "the top level"
    if not isinstance(data, dict):
        raise ConfigError(f"{table} must be a table of settings, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    settable = {f.name for f in fields(cls) if f.init}
    unknown = sorted(set(data) - settable)
    prefix = f"{where}." if where else ""
    if unknown:
        raise ConfigError(
            f"unknown key {prefix}{unknown[0]}; allowed keys of {table}: {', '.join(sorted(settable))}"
        )
    kwargs = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        if (
            is_dataclass(hints[f.name])
            and isinstance(value, dict)
            and f.default_factory is not dataclasses.MISSING
        ):
            # A partial table overrides this field's own default (which may differ from the class's).
            value = _merge(to_data(f.default_factory()), value, hints[f.name])
        kwargs[f.name] = _coerce(value, hints[f.name], prefix + f.name)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{table} {exc}" if where else str(exc)) from None


def _coerce(value: Any, hint: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if is_dataclass(hint):
        return build(hint, value, where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, option, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where} has an impossible value {value!r}")
    if hint is Any:
        return value
    if origin is tuple or hint is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        inner = args[0] if args else Any
        return tuple(_coerce(v, inner, f"{where}[]") for v in value)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a table, got {value!r}")
        return dict(value)
    if origin is frozenset:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        return frozenset(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return value
    raise ConfigError(f"{where} cannot be set from a configuration file")


def to_data(config: Any) -> Any:
    """Plain JSON-able data of a configuration (callables, which files cannot set, are left out)."""
    if is_dataclass(config):
        return {
            f.name: to_data(getattr(config, f.name))
            for f in fields(config)
            if f.init and not callable(getattr(config, f.name))
        }
    if isinstance(config, tuple | list | frozenset):
        return [to_data(v) for v in (sorted(config) if isinstance(config, frozenset) else config)]
    if isinstance(config, dict):
        return {k: to_data(v) for k, v in config.items()}
    return config


def merge_tables(base: dict, changes: dict, cls: type) -> dict:
    """``base`` with ``changes``, both (partial) data of dataclass ``cls``: see :func:`_merge`."""
    return _merge(base, changes, cls)


def leaf_keys(data: dict, cls: type, prefix: str = "") -> list[str]:
    """The dotted keys that ``data`` (partial data of dataclass ``cls``) sets: a table of a nested dataclass
    is followed into, any other value (a plain table such as ``rollout.action_prefix`` included) is one
    key."""
    hints = typing.get_type_hints(cls)
    keys = []
    for key, value in data.items():
        hint = hints.get(key)
        if is_dataclass(hint) and isinstance(value, dict):
            keys += leaf_keys(value, hint, f"{prefix}{key}.")
        else:
            keys.append(prefix + key)
    return keys


def _merge(base: dict, changes: dict, cls: type) -> dict:
    """``base`` (the data of a dataclass ``cls``) with ``changes``: a table of a nested dataclass is
    merged key by key, any other value (a plain table such as ``rollout.action_prefix`` included)
    replaces the default whole, so that ``{}`` empties it."""
    hints = typing.get_type_hints(cls)
    merged = dict(base)
    for key, value in changes.items():
        hint = hints.get(key)
        if is_dataclass(hint) and isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value, hint)
        else:
            merged[key] = value
    return merged


def set_dotted(data: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted}: {key} is not a table")
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``key.sub=value``; the value is read as TOML (``3``, ``0.5``, ``true``, ``'text'``, ``[1, 2]``),
    and as a plain string when it is not valid TOML."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like section.key=value")
    key, raw = (part.strip() for part in text.split("=", 1))
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def get_dotted(data: dict, dotted: str) -> tuple[bool, Any]:
    """(found, value) of a dotted key in nested tables."""
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def pop_dotted(data: dict, dotted: str) -> None:
    """Remove a dotted key from nested tables, if it is there."""
    *tables, last = dotted.split(".")
    found, node = get_dotted(data, ".".join(tables)) if tables else (True, data)
    if found and isinstance(node, dict):
        node.pop(last, None)


def upgrade_renamed(
    data: dict, keys: dict[str, str], values: dict[str, dict[str, str]], where: str = "the configuration"
) -> tuple[dict, list[str]]:
    """``data`` with renamed keys and values under their new names, and one deprecation message per
    old name found (the caller shows them). A key given under both its old and its new name is refused:
    which one was meant cannot be known."""
    import copy

    data = copy.deepcopy(data)
    notes = []
    for old, new in keys.items():
        found, value = get_dotted(data, old)
        if not found:
            continue
        if get_dotted(data, new)[0]:
            raise ConfigError(f"{where} sets both {old} (its old name) and {new}: keep only {new}")
        pop_dotted(data, old)
        set_dotted(data, new, value)
        notes.append(
            f"{old} is deprecated: it is called {new} now (the old name is read until the next release)"
        )
    for key, renames in values.items():
        found, value = get_dotted(data, key)
        if found and isinstance(value, str) and value in renames:
            set_dotted(data, key, renames[value])
            notes.append(
                f"{key} = {value!r} is deprecated: it is {renames[value]!r} now (read until the next release)"
            )
    return data, notes
