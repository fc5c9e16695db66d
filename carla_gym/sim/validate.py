"""Input checks shared by the simulator and the env: one rule for "a number in a range"."""

from __future__ import annotations

import math
import numbers
from typing import Any


def check_number(key: str, value: Any, lo: float, hi: float, integer: bool = False) -> float | int:
    """Check that ``value`` is a finite number (an integer if asked) in [lo, hi].

    Python and numpy numbers are accepted; booleans are not.

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
    kind = numbers.Integral if integer else numbers.Real
    finite = isinstance(value, numbers.Integral) or (isinstance(value, kind) and math.isfinite(value))
    if isinstance(value, bool) or not isinstance(value, kind) or not finite or not lo <= value <= hi:
        raise ValueError(f"{key}={value!r}: must be {'an integer' if integer else 'a number'} in [{lo}, {hi}]")
    return int(value) if integer else float(value)
