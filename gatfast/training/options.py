"""One option of :class:`~gatfast.training.config.TrainConfig`: how it is checked and shown."""

from __future__ import annotations

import numbers
import os
import re
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Option", "check_address", "option_field"]

#: ``[protocol://]host:port`` of a Dask scheduler: a host name, IPv4 address or ``[IPv6]``, and a port.
_ADDRESS = re.compile(r"(?:(tcp|tls|ws|wss|ucx)://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)"
                      r":([0-9]{1,5})")


@dataclass(frozen=True)
class Option:
    """How one field of :class:`TrainConfig` is checked and shown.

    Attributes
    ----------
    help : str
        One line for ``--help`` and the docs.
    group : str
        ``"model"``, ``"data"``, ``"optimisation"``, ``"runtime"`` or ``"output"``.
    kind : type
        ``int``, ``float``, ``bool``, ``str``, ``os.PathLike`` (a path),
        ``numpy.dtype`` (a dtype, stored by name) or ``tuple`` (ints, such
        as fanouts; from the command line ``10,10``).
    choices : tuple, optional
        Allowed values (besides None when ``optional``).
    low, high : float, optional
        Bounds, inclusive unless ``low_open`` / ``high_open``.
    optional : bool
        None is allowed (it means "off" or "not set"; the help says which).
    recipe : bool
        Part of a training recipe (presets set only these); run options such
        as output paths are not.
    """

    help: str
    group: str
    kind: type
    choices: tuple = None
    low: float = None
    high: float = None
    low_open: bool = False
    high_open: bool = False
    optional: bool = False
    recipe: bool = True

    def check(self, name, value):
        """``value`` converted to the field's type, or TypeError/ValueError naming ``name``."""
        if value is None:
            if self.optional:
                return None
            raise TypeError(f"{name} must not be None")
        kind = self.kind
        if kind is bool:
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{name} must be True or False, got {type(value).__name__}")
            return bool(value)
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            value = int(value)
        elif kind is float:
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"{name} must be a number, got {type(value).__name__}")
            value = float(value)
            if not np.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value}")
        elif kind is os.PathLike:
            if not isinstance(value, (str, os.PathLike)):
                raise TypeError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}")
            value = os.fspath(value)
            if not value:
                raise ValueError(f"{name} must be a non-empty path")
        elif kind is tuple:  # a sequence of ints, e.g. fanouts per layer
            if isinstance(value, str):
                value = [v for v in value.split(",") if v.strip()]
                try:
                    value = [int(v) for v in value]
                except ValueError:
                    raise ValueError(f"{name} must be comma-separated ints, got {value!r}") from None
            if not isinstance(value, (list, tuple)) or not value:
                raise TypeError(f"{name} must be a non-empty sequence of ints, got {value!r}")
            for v in value:
                if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                    raise TypeError(f"{name} must hold ints, got {type(v).__name__}")
                if self.low is not None and v < self.low and v != -1 or v == 0:
                    raise ValueError(f"{name} entries must be >= 1 (or -1 for all), got {v}")
            return tuple(int(v) for v in value)
        elif kind is np.dtype:
            try:
                value = np.dtype(value).name
            except TypeError:
                raise TypeError(f"{name} must be 'float32' or 'float64' (or the NumPy type), got {value!r}") from None
        elif kind is str:
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{name} must be one of {list(self.choices)!r}, got {value!r}")
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            raise ValueError(f"{name} must be {'>' if self.low_open else '>='} {self.low:g}, got {value}")
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            raise ValueError(f"{name} must be {'<' if self.high_open else '<='} {self.high:g}, got {value}")
        return value


def option_field(default, help, group, kind, **kw):
    """A dataclass field whose metadata is the :class:`Option` that checks and shows it."""
    return field(default=default, metadata={"option": Option(help, group, kind, **kw)})




def check_address(name, value):
    """A scheduler address ``[protocol://]host:port`` as ``protocol://host:port`` (tcp by default).

    Raises
    ------
    TypeError
        ``value`` is not a str.
    ValueError
        It is not ``[tcp|tls|ws|wss|ucx://]host:port`` with a port from 1 to 65535; the message names ``name``.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str such as 'tcp://127.0.0.1:8786', got {type(value).__name__}")
    match = _ADDRESS.fullmatch(value.strip())
    if match is None or not 1 <= int(match[3]) <= 65535:
        raise ValueError(f"{name} must be an address such as 'tcp://127.0.0.1:8786' ([tcp|tls|ws|wss|ucx://]"
                         f"HOST:PORT, port 1-65535), got {value!r}")
    return f"{match[1] or 'tcp'}://{match[2]}:{int(match[3])}"
