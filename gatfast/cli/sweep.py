"""``gatfast sweep``: a grid of training configurations, as tasks on a Dask cluster."""

from __future__ import annotations

import argparse

from ..training.config import TrainConfig
from .options import CLIError, option_type

__all__ = ["cmd_sweep"]


def _grid(specs):
    """``--grid`` arguments as ``{option: [values]}``, each value checked as the option's flag would be."""
    options, grid = TrainConfig.options(), {}
    for name, *texts in specs:
        name = name.replace("-", "_")
        if name not in options:
            raise CLIError(f"--grid: {name!r} is not a training option (see 'gatfast train --help')")
        if not texts:
            raise CLIError(f"--grid {name}: give at least one value")
        option = options[name][1]
        grid[name] = [_grid_value(name, option, t) for t in texts]
    return grid


def _grid_value(name, option, text):
    if option.optional and text.lower() == "none":
        return None
    if option.kind is bool:
        if text.lower() not in ("true", "false"):
            raise CLIError(f"--grid {name}: expected true or false, got {text!r}")
        return text.lower() == "true"
    try:
        return option_type(option)(text)
    except argparse.ArgumentTypeError as exc:
        raise CLIError(f"--grid {name}: {exc}") from None


def cmd_sweep(args):
    from .. import _paths
    from .._io import atomic_write_text
    from ..distributed import format_table, sweep

    options = {
        k: v for k, v in vars(args).items() if k not in ("command", "dataset", "preset", "grid", "csv")
    }
    grid = _grid(args.grid)
    _paths.check_output_paths([("--csv", args.csv)], [])
    config = TrainConfig.preset(args.preset, **options) if args.preset else None
    rows = sweep(args.dataset, grid, config, **options)
    shown = [
        k
        for k in ("val_accuracy", "test_accuracy", "val_loss", "test_loss", "best_epoch", "seconds")
        if k in rows[0]
    ]
    print(format_table(rows, list(grid) + shown))
    if args.csv:
        columns = list(dict.fromkeys(k for row in rows for k in row))
        lines = [",".join(columns)] + [",".join(_csv_cell(row.get(c, "")) for c in columns) for row in rows]
        atomic_write_text(args.csv, "\n".join(lines) + "\n")
    return 0


def _csv_cell(value):
    text = repr(value) if isinstance(value, float) else str(value)
    return f'"{text}"' if "," in text else text
