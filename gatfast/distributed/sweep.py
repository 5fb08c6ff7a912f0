"""A grid of training configurations, each a one-process run, as tasks on a cluster (or here, one by one)."""

from __future__ import annotations

import itertools
import uuid

from ..data import GraphDataset, NodeDataset, load_dataset
from ..training import TrainConfig, preset_for
from ..training.errors import WorkersLost
from .cluster import open_session
from .faults import DONE, KilledWorker
from .tasks import run_config

__all__ = ["format_table", "sweep"]

#: Options a sweep cannot vary or set: each point is a one-process run with no files.
RUN_ONLY = (
    "workers",
    "scheduler",
    "worker_timeout",
    "save",
    "metrics_json",
    "diagnose",
    "quiet",
    "log_every",
)


def _grid_points(grid):
    if not isinstance(grid, dict) or not grid:
        raise TypeError(f"grid must be a non-empty dict of option -> list of values, got {grid!r}")
    names = TrainConfig.options()
    for name, values in grid.items():
        if name not in names:
            raise ValueError(
                f"grid option {name!r} is not a training option; the options are {sorted(names)}"
            )
        if name in RUN_ONLY:
            raise ValueError(f"grid option {name!r} cannot be swept (it is about where and how a run goes)")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__") or not list(values):
            raise TypeError(f"grid[{name!r}] must be a non-empty list of values, got {values!r}")
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(list(grid[k]) for k in keys))]


def sweep(dataset, grid, config=None, *, client=None, stream=None, **options):
    """Train one model per combination of ``grid`` and return one row per combination.

    Parameters
    ----------
    dataset : str, path, NodeDataset or GraphDataset
        As for :func:`gatfast.train`. A name or path is loaded once per
        distinct ``(dtype, normalize_features)`` of the grid.
    grid : dict
        ``{option: [value, ...]}``: fields of :class:`~gatfast.TrainConfig`
        (not the run options ``workers``, ``scheduler``, ``save`` ...).
    config : TrainConfig, optional
        The base configuration (default: the dataset's preset).
    client : distributed.Client, optional
        Run the combinations as tasks on this cluster. ``workers=N`` or
        ``scheduler=ADDRESS`` (in ``options`` or ``config``) do the same
        with a cluster gatfast opens; with none of them the combinations run
        here, one after the other.
    stream : file object, optional
        Where each finished row is reported (default: stdout; nothing with ``quiet=True``).
    **options
        Fields of :class:`TrainConfig` for every combination.

    Returns
    -------
    list of dict
        In grid order: the combination's values, then its final metrics
        (those of :func:`gatfast.train`; k-fold means with ``folds``).

    Raises
    ------
    WorkersLost
        The cluster was lost; ``exc.result`` holds the rows finished so far
        (None in the rows not finished).
    """
    points = _grid_points(grid)
    base = (config or TrainConfig()).replace(**options)
    for name in ("save", "metrics_json", "diagnose"):
        if getattr(base, name):
            raise ValueError(f"{name} is for one run; a sweep returns its table (gatfast sweep --csv PATH)")
    loaded, configs = {}, []
    for point in points:
        raw = (config or TrainConfig()).replace(**options, **point)
        key = (raw.dtype, raw.normalize_features)
        if key not in loaded:
            loaded[key] = _load(dataset, raw)
        # as gatfast.train: the caller's config, else the preset for the dataset's task
        cfg = raw if config is not None else TrainConfig.preset(preset_for(loaded[key]), **options, **point)
        configs.append((key, cfg))
    say = _printer(stream, base.quiet)
    if client is None and base.workers is None and base.scheduler is None:
        metrics = []
        for (key, cfg), point in zip(configs, points):
            metrics.append(run_config(loaded[key], cfg))
            say(_row(point, metrics[-1]))
    else:
        with open_session(
            client=client, workers=base.workers, scheduler=base.scheduler, worker_timeout=base.worker_timeout
        ) as session:
            metrics = _on_cluster(session, loaded, configs, points, say)
    return [_row(p, m) for p, m in zip(points, metrics)]


def _load(dataset, config):
    if isinstance(dataset, (NodeDataset, GraphDataset)):
        return dataset
    return load_dataset(dataset, dtype=config.numpy_dtype, normalize_features=config.normalize_features)


def _on_cluster(session, loaded, configs, points, say):
    client, watch = session.client, session.watch
    data = {key: watch.scatter(ds, everywhere=True) for key, ds in loaded.items()}
    tag = uuid.uuid4().hex[:8]

    def submit(i):
        key, cfg = configs[i]
        if data[key].status != "finished":  # every copy was lost with its workers: send it again
            data[key] = watch.scatter(loaded[key], everywhere=True)
        return client.submit(run_config, data[key], cfg, key=f"gatfast-sweep-{i}-{tag}", pure=False)

    pending = {i: submit(i) for i in range(len(configs))}
    metrics = [None] * len(configs)
    try:
        while pending:
            watch.wait(pending.values(), first=True)
            for i, future in list(pending.items()):
                if future.status not in DONE:
                    continue
                del pending[i]
                if future.status == "cancelled":
                    pending[i] = submit(i)
                elif future.status == "error" and isinstance(future.exception(), KilledWorker):
                    raise WorkersLost(
                        f"configuration {points[i]} was running on workers that died, again and "
                        f"again (out of memory?)"
                    )
                else:
                    metrics[i] = future.result()
                    say(_row(points[i], metrics[i]))
    except WorkersLost as exc:
        raise WorkersLost(str(exc), [_row(p, m) if m else None for p, m in zip(points, metrics)]) from None
    finally:
        for future in data.values():
            future.release()
    return metrics


def _row(point, metrics):
    return {**point, **{k: v for k, v in metrics.items() if k not in point}}


def _printer(stream, quiet):
    def say(row):
        if not quiet:
            print("done: " + ", ".join(f"{k}={_text(v)}" for k, v in row.items()), file=stream, flush=True)

    return say


def _text(value):
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def format_table(rows, columns=None):
    """``rows`` (dicts) as an aligned text table: a header line, then one line per row.

    Parameters
    ----------
    rows : list of dict
        One dict per row, from column name to value; a missing column is left blank.
    columns : list of str, optional
        The columns, in order (default: every key of ``rows``, in order of first appearance).

    Returns
    -------
    str
        The table, columns right-aligned and two spaces apart, floats to 4 significant digits.
    """
    if columns is None:
        columns = list(dict.fromkeys(k for row in rows for k in row))
    cells = [[_text(row.get(c, "")) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[j]) for r in cells]) for j, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)
