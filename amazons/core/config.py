"""Config dataclasses as plain data: the one way to turn a config into a dict and back.

Every config of the project is a frozen dataclass of plain values and nested config dataclasses
(`TrainConfig` and its groups, `NetConfig`, `OptimConfig`, `SearchConfig`, `InferenceConfig`,
`SelfPlayConfig`, `EvalConfig`, `RayConfig`). `config_to_dict` gives the JSON-ready form that
`config.json` and checkpoints store; `config_from_dict` builds the dataclass back from it.

Compatibility with older files (run directories' `config.json`, checkpoints' `net_config` and
`optim_config`, `amazons/models/default.json`) is one rule, applied here and nowhere else:

* a field missing from the dict takes the dataclass's default. A field added to a config must
  therefore default to the behaviour the code had before the field existed;
* a field the dataclass does not know is an error naming it (a typo must not be ignored);
* JSON lists become tuples where the field is a tuple (`OptimConfig.betas`,
  `EvalConfig.opponents`), and nested dicts become the nested dataclasses.

Imports the standard library only.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["ConfigError", "config_from_dict", "config_to_dict"]

T = TypeVar("T")


class ConfigError(ValueError):
    """A dict does not describe a config: unknown or mistyped fields; the message names them."""


def config_to_dict(config: Any) -> Any:
    """Nested config dataclasses -> JSON-ready dicts (tuples become lists).

    Args:
        config: a dataclass instance (or a value inside one).

    Returns:
        A dict of plain values for a dataclass; lists for tuples; other values unchanged.
    """
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {item.name: config_to_dict(getattr(config, item.name))
                for item in dataclasses.fields(config)}
    if isinstance(config, (tuple, list)):
        return [config_to_dict(value) for value in config]
    return config


def config_from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
    """The config dataclass `cls` from `data` (the inverse of `config_to_dict`).

    Missing fields take their defaults (older files load); nested dataclass fields are built from
    nested dicts, tuple fields from lists. The dataclass validates the values itself.

    Args:
        cls: a config dataclass, e.g. `TrainConfig` or `NetConfig`.
        data: its fields, as `config_to_dict` writes them.

    Raises:
        ConfigError: `data` is not a dict, names a field `cls` does not have (every unknown
            field is named, with the path of nested ones), or lacks a field without a default.
        ValueError: the dataclass refuses a value (its own error type, e.g. `NetConfigError`).
    """
    return _build(cls, data, cls.__name__)


def _build(cls: type[T], data: Any, where: str) -> T:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a dict of fields, got {type(data).__name__}")
    fields = {item.name: item for item in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown fields {unknown}; known: {sorted(fields)}")
    required = sorted(name for name, item in fields.items() if name not in data
                      and item.default is dataclasses.MISSING
                      and item.default_factory is dataclasses.MISSING)
    if required:
        raise ConfigError(f"{where}: missing fields {required}")
    hints = typing.get_type_hints(cls)
    values = {name: _value(hints[name], value, f"{where}.{name}") for name, value in data.items()}
    return cls(**values)


def _value(hint: Any, value: Any, where: str) -> Any:
    nested = _dataclass_of(hint)
    if nested is not None and isinstance(value, Mapping):
        return _build(nested, value, where)
    if nested is not None and not dataclasses.is_dataclass(value) and value is not None:
        raise ConfigError(f"{where}: expected a dict of {nested.__name__} fields, "
                          f"got {type(value).__name__}")
    if typing.get_origin(hint) is tuple and isinstance(value, (list, tuple)):
        return tuple(value)
    return value


def _dataclass_of(hint: Any) -> type | None:
    """The dataclass a field's type names (also inside `X | None`), else None."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        for argument in typing.get_args(hint):
            if isinstance(argument, type) and dataclasses.is_dataclass(argument):
                return argument
    return None
