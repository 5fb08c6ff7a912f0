"""The flags of ``gatfast train``, generated from :class:`~gatfast.training.TrainConfig`, and the parser."""

from __future__ import annotations

import argparse
import os

from ..training.config import PRESETS, Option, TrainConfig

__all__ = [
    "CLIError",
    "GENERATOR_FLAGS",
    "Parser",
    "add_train_options",
    "option_type",
    "positive_float",
    "positive_int",
]


class CLIError(Exception):
    """A user error: printed without a traceback, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the message, then where to find help (exit status 2).

    Abbreviated options are refused: with dozens of options a prefix such as
    ``--out`` would silently mean ``--out-heads``.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def option_type(option):
    """An argparse type that parses text as the option's kind and checks it with the config's rules."""
    kind = {int: int, float: float}.get(option.kind, str)

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {_describe(option)}, got {text!r}") from None
        try:
            return option.check("the value", value)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _describe(option):
    if option.kind is int:
        return "a whole number" + (f" >= {option.low:g}" if option.low is not None else "")
    if option.kind is float:
        return "a number"
    return "a value"


def _default_text(name, default):
    """The default, and where a preset differs from it."""
    parts = [f"default: {default}"]
    for preset, values in PRESETS.items():
        if name in values:
            parts.append(f"preset {preset}: {values[name]}")
    return "; ".join(parts)


def add_config_options(parser):
    """One flag per TrainConfig field, grouped as in the dataclass.

    Every default is ``argparse.SUPPRESS``: a flag not given sets nothing,
    so the preset (chosen by the dataset, or by ``--preset``) decides.
    """
    groups = {}
    for name, (default, option) in TrainConfig.options().items():
        group = groups.get(option.group)
        if group is None:
            group = groups[option.group] = parser.add_argument_group(option.group)
        flag = "--" + name.replace("_", "-")
        help_text = f"{option.help} ({_default_text(name, default)})"
        if option.kind is bool:
            if default:
                group.add_argument(
                    "--no-" + name.replace("_", "-"),
                    dest=name,
                    action="store_const",
                    const=False,
                    default=argparse.SUPPRESS,
                    help=f"turn off: {help_text}",
                )
            else:
                group.add_argument(
                    flag,
                    dest=name,
                    action="store_const",
                    const=True,
                    default=argparse.SUPPRESS,
                    help=help_text,
                )
            continue
        kwargs = dict(dest=name, default=argparse.SUPPRESS, help=help_text)
        if option.choices is not None:
            kwargs["choices"] = list(option.choices)
        else:
            kwargs["type"] = option_type(option)
            kwargs["metavar"] = {os.PathLike: "PATH", tuple: "K[,K...]"}.get(option.kind, name.upper())
        group.add_argument(flag, **kwargs)


def add_train_options(p):
    p.add_argument(
        "--dataset",
        default="karate",
        metavar="NAME_OR_PATH",
        help="'karate' (embedded, the default), a shipped dataset ('cora', 'mutag'), a generator "
        "('csbm', 'traffic_scenes') or a Planetoid/TU .npz file (formats in docs/DATA.md)",
    )
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="start from this recipe instead of the dataset's own (gat: node classification, "
        "tu: graph classification, scenes: per-node regression on many graphs)",
    )
    gen = p.add_argument_group("generated datasets (--dataset csbm or traffic_scenes)")
    for flag, dest, kind, help_text in GENERATOR_FLAGS:
        gen.add_argument(flag, dest=f"gen_{dest}", type=kind, default=argparse.SUPPRESS, help=help_text)
    add_config_options(p)


positive_int = option_type(Option("", "", int, low=1))
positive_float = option_type(Option("", "", float, low=0.0, low_open=True))

#: Train flags that become the generator's keyword arguments (``train(dataset_options=...)``).
GENERATOR_FLAGS = (
    ("--nodes", "num_nodes", positive_int, "csbm: number of nodes (default: 1000)"),
    ("--avg-degree", "avg_degree", positive_float, "csbm: average degree (default: 5)"),
    ("--classes", "num_classes", positive_int, "csbm: number of classes (default: 2)"),
    (
        "--features",
        "num_features",
        positive_int,
        "csbm, traffic_scenes: input features per node (default: 16 and 4)",
    ),
    ("--graphs", "num_graphs", positive_int, "traffic_scenes: number of scenes (default: 500)"),
)
