"""Settings blocks of a config: typed frozen dataclasses, checked by one loader.

A block (`span_consistency:`, `new_span:`, ...) is a frozen dataclass deriving from
`Settings`. `Settings.from_dict(values, where)` is the one place that refuses unknown keys,
missing required ones and values of the wrong type (from the fields' type hints, nested
blocks included); a block's own `check()` adds the range rules types cannot express.
Errors name the key with its path (`span_consistency.event_time.unit: ...`). TF-free.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal


class SettingsError(ValueError):
    """A settings value that cannot be used; the message starts with the key's path."""


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def check_type(name: str, value: Any, hint: Any) -> Any:
    """`value` checked against the type hint `hint` (and converted where lossless).

    Handles Any, Literal, Optional/unions, tuple[X, ...], list[X], Mapping[str, X], nested
    `Settings` classes, int/float/str/bool (an int is a float; a bool is not an int).

    Raises:
      SettingsError: naming `name`.
    """
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if isinstance(hint, type) and issubclass(hint, Settings):
        return hint.from_dict(value, name)
    if origin is Literal:
        if value not in args:
            raise SettingsError(f"{name}: {value!r} is not one of {list(args)}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        problems = []
        for alternative in inner:  # the first that takes the value
            try:
                return check_type(name, value, alternative)
            except SettingsError as e:
                problems.append(str(e).removeprefix(f"{name}: "))
        raise SettingsError(f"{name}: " + "; or ".join(problems))
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise SettingsError(f"{name}: expected a list, got {value!r}")
        return origin(check_type(f"{name}[{i}]", v, args[0]) for i, v in enumerate(value))
    if origin in (Mapping, dict) or hint in (Mapping, dict):
        if not isinstance(value, Mapping):
            raise SettingsError(f"{name}: expected a mapping, got {value!r}")
        if len(args) == 2 and args[1] is not Any:
            return {k: check_type(_join(name, str(k)), v, args[1]) for k, v in value.items()}
        return dict(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool):
        if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
            expected = "true or false" if hint is bool else hint.__name__
            raise SettingsError(f"{name}: expected {expected}, got {value!r}")
        return value
    return value


def build(cls, values: Mapping[str, Any] | None, where: str = ""):
    """An instance of the dataclass `cls` from a mapping: the one unknown-key check.

    Refuses keys `cls` has no field for (listing the known ones), missing required keys and
    values of the wrong type (from the fields' type hints). Works for any dataclass, so a
    model's own `HParams` is read the same way as the project's settings blocks.

    Raises:
      SettingsError: naming the key's path (`where.key`).
    """
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        raise SettingsError(f"{where or cls.__name__}: expected a mapping, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields), key=str)
    if unknown:
        close = [m for k in unknown for m in difflib.get_close_matches(str(k), fields, n=1, cutoff=0.8)]
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise SettingsError(f"{where + ': ' if where else ''}unknown key(s) {', '.join(map(str, unknown))}"
                            f" ({hint}known: {', '.join(fields)})")
    missing = [n for n, f in fields.items() if n not in values and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise SettingsError(f"{where + ': ' if where else ''}missing key(s) {', '.join(missing)}")
    hints = typing.get_type_hints(cls)
    return cls(**{k: check_type(_join(where, k), v, hints[k]) for k, v in values.items()})


class Settings:
    """Base of a settings block (subclasses are frozen dataclasses).

    Override `check(self)` for rules between fields or ranges: raise SettingsError whose
    message starts with the field name; `from_dict` prefixes the block's path.
    """

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None, where: str = ""):
        """The block from a mapping (None or {} for the defaults).

        Raises:
          SettingsError: an unknown or missing key, a wrong type or a value out of range,
            naming the key's path.
        """
        if isinstance(values, cls):
            return values
        settings = build(cls, values, where)
        try:
            settings.check()
        except SettingsError as e:
            raise SettingsError(_join(where, str(e)) if where else str(e)) from None
        return settings

    def check(self) -> None:
        """Rules types cannot express; raises SettingsError starting with the field name."""

    def to_dict(self) -> dict:
        """Plain values (JSON- and YAML-safe), nested blocks included."""
        return dataclasses.asdict(self)
