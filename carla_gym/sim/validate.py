"""Input checks shared by the simulator, the env and the OpenEnv wire: one rule per kind of value.

* `check_number`: a number in a range (Python, numpy, 0-d array or `decimal.Decimal`).
* `check_seed`: a reset seed.
* `json_safe`: a user value as plain JSON data, the form in which it crosses the OpenEnv wire.
  Both Gymnasium backends pass ``scenario_config`` through it, so a value is converted or
  refused alike whether it is simulated in-process or sent to a server.
"""

from __future__ import annotations

import decimal
import math
import numbers
from typing import Any

import numpy as np

SEED_MAX = 2**63 - 1
"""Largest reset seed: the largest signed 64-bit integer, which every JSON peer reads exactly."""
MAX_JSON_DEPTH = 64
"""Deepest nesting `json_safe` accepts (the server's frame guard refuses deeper JSON too)."""


def _plain_number(value: Any) -> Any:
    """``value`` with numpy scalars, 0-d arrays and Decimals turned into Python numbers (else unchanged)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value.as_tuple().exponent >= 0:  # written without a fraction: "3", "3E2"
            return int(value)
        return float("nan") if value.is_snan() else float(value)
    return value


def check_number(key: str, value: Any, lo: float, hi: float, integer: bool = False) -> float | int:
    """Check that ``value`` is a finite number (an integer if asked) in [lo, hi].

    Python and numpy numbers, 0-d numpy arrays and `decimal.Decimal` are accepted; booleans
    (Python or numpy) are not. A Decimal written without a fraction (``Decimal("3")``) counts
    as an integer, ``Decimal("3.0")`` as a float, as Python's ``3`` and ``3.0`` do.

    Args:
        key: The argument's name, for the error message.
        value: The value to check.
        lo: Smallest valid value.
        hi: Largest valid value.
        integer: Require an integral type.

    Returns:
        The value as a Python ``int`` (``integer=True``) or ``float``.

    Raises:
        ValueError: Naming the key, the bad value and the valid range.
    """
    cls = type(value)  # fast path for plain Python numbers, the common case
    if (cls is float and not integer) or cls is int:
        if lo <= value <= hi:  # False for NaN and, with finite bounds, for infinities
            return value if integer or cls is float else float(value)
    plain = _plain_number(value)
    kind = numbers.Integral if integer else numbers.Real
    finite = isinstance(plain, numbers.Integral) or (isinstance(plain, kind) and math.isfinite(plain))
    if isinstance(plain, bool) or not isinstance(plain, kind) or not finite or not lo <= plain <= hi:
        raise ValueError(f"{key}={value!r}: must be {'an integer' if integer else 'a number'} in [{lo}, {hi}]")
    return int(plain) if integer else float(plain)


def check_seed(seed: Any) -> int | None:
    """A reset seed: None, or an integer in [0, `SEED_MAX`] (Python or numpy).

    Raises:
        ValueError: Naming the bad seed and the valid range.
    """
    return None if seed is None else check_number("seed", seed, 0, SEED_MAX, integer=True)


def check_config(value: Any, key: str = "scenario_config") -> dict:
    """A ``scenario_config`` (or None) as a plain JSON dict: the type check, then `json_safe`.

    Args:
        value: What the user passed; None means no overrides.
        key: Its name in errors (``"options['scenario_config']"`` for a reset option).

    Returns:
        A new dict of plain JSON values ({} for None).

    Raises:
        TypeError: ``value`` is neither None nor a dict.
        ValueError: From `json_safe`, naming the offending entry.
    """
    if value is not None and not isinstance(value, dict):
        raise TypeError(f"{key} must be a dict, got {type(value).__name__}: {value!r}")
    return json_safe(value or {}, key)


def json_safe(value: Any, key: str, _depth: int = 0) -> Any:
    """``value`` as plain JSON data (str, int, float, bool, None, list, dict with str keys).

    Conversions: numpy booleans, integers and floats and 0-d arrays become the Python scalar;
    other numpy arrays and tuples become lists; `decimal.Decimal` and other real numbers become
    ``float`` (``int`` when integral, e.g. ``Decimal("3")``); ``str`` subclasses become ``str``.
    Values are converted, never range-checked: the receiver checks them.

    Args:
        value: What a user passed (a ``scenario_config`` dict, a seed, action metadata ...).
        key: Its name, used in errors; nested values are named ``key['field']`` / ``key[i]``.

    Returns:
        A new plain value (dicts and lists are copied).

    Raises:
        ValueError: Naming the value's path for NaN or infinite numbers (JSON has neither),
            dict keys that are not strings, nesting deeper than `MAX_JSON_DEPTH`, and values
            JSON cannot carry (sets, bytes, complex numbers, arbitrary objects).
    """
    cls = type(value)
    if cls is str or cls is int or cls is bool or value is None:
        return value
    if cls is float:
        if math.isfinite(value):
            return value
        raise ValueError(f"{key}={value!r}: must be a finite number (JSON has no NaN or Infinity)")
    if _depth >= MAX_JSON_DEPTH:
        raise ValueError(f"{key}: nested deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{key}: key {k!r} ({type(k).__name__}) is not a string; keys must be strings")
            out[str(k)] = json_safe(v, f"{key}[{str(k)!r}]", _depth + 1)
        return out
    if isinstance(value, list | tuple) or (isinstance(value, np.ndarray) and value.ndim > 0):
        return [json_safe(v, f"{key}[{i}]", _depth + 1) for i, v in enumerate(value)]
    if isinstance(value, str):
        return str(value)
    plain = _plain_number(value)
    if isinstance(plain, bool):
        return plain
    if isinstance(plain, numbers.Integral):
        return int(plain)
    if isinstance(plain, numbers.Real):
        return json_safe(float(plain), key, _depth)
    raise ValueError(f"{key}={value!r}: {type(value).__name__} values cannot be sent as JSON; use numbers, "
                     "strings, booleans, None, lists or dicts with string keys")
