"""The Parameters section of :class:`gatfast.TrainConfig`, generated from its options.

Every training option has one home, its field in ``gatfast/training/config.py``
(type, default, allowed values, help); the command line's ``--help`` is
generated from it, and so is this section, rather than repeating 36 help
texts in the class docstring where they would drift. ``docs/conf.py`` adds
it to the API reference and ``docs/check_docstrings.py`` validates the
docstring with it.
"""

from __future__ import annotations

import os

import numpy as np

TARGET = "gatfast.training.config.TrainConfig"


def _type(default, opt):
    if opt.choices:
        text = "{" + ", ".join(f'"{c}"' if isinstance(c, str) else repr(c) for c in opt.choices) + "}"
    else:
        text = {
            int: "int",
            float: "float",
            bool: "bool",
            str: "str",
            tuple: "tuple of int",
            os.PathLike: "str or path-like",
            np.dtype: "str",
        }[opt.kind]
    if opt.optional:
        text += " or None"
    shown = f'"{default}"' if isinstance(default, str) else repr(default)
    return f"{text}, default {shown}"


def _num(value):
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _range(opt):
    if opt.low is None and opt.high is None:
        return ""
    if opt.high is None:
        return f"; {'>' if opt.low_open else '>='} {_num(opt.low)}"
    if opt.low is None:
        return f"; {'<' if opt.high_open else '<='} {_num(opt.high)}"
    low, high = _num(opt.low), _num(opt.high)
    return f"; in {'(' if opt.low_open else '['}{low}, {high}{')' if opt.high_open else ']'}"


def parameters_section():
    """Return the numpydoc Parameters section of TrainConfig, one string per line.

    Returns
    -------
    list of str
        ``Parameters``, its underline, then ``name : type, default value`` and
        the option's help (capitalised, with its bounds) for every field.
    """
    from gatfast.training.config import TrainConfig

    lines = ["Parameters", "----------"]
    for name, (default, opt) in TrainConfig.options().items():
        text = opt.help[0].upper() + opt.help[1:] + _range(opt)
        lines += [f"{name} : {_type(default, opt)}", f"    {text.rstrip('.')}."]
    return lines


def with_parameters(lines):
    """Insert :func:`parameters_section` into docstring lines, before Examples (or at the end).

    Parameters
    ----------
    lines : list of str
        The class docstring, dedented, one string per line.

    Returns
    -------
    list of str
        The lines with the section added (a new list).
    """
    section = parameters_section()
    at = next((k for k, line in enumerate(lines) if line.strip() == "Examples"), len(lines))
    head = list(lines[:at])
    if head and head[-1].strip():
        head.append("")
    tail = list(lines[at:])
    return head + section + ([""] + tail if tail else [])
