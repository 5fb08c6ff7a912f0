"""Record the Θ_R gradient flow once per epoch, to CSV and to a plot."""

from __future__ import annotations

import csv
import os

import numpy as np

from .._io import atomic_save_figure, atomic_write
from ..layers import GATv2Layer
from .network import theta_r_flow_network
from .plotting import pyplot
from .theta_r import CAUSES, theta_r_flow

__all__ = ["ThetaRFlowRecorder"]


class ThetaRFlowRecorder:
    """Record the Θ_R gradient flow once per epoch, to CSV and to a plot.

    Each call to :meth:`record` adds one row per attention layer with the
    dead fraction (overall and per cause) and the gradient norm of every
    parameter, then rewrites the CSV atomically (temp file + ``os.replace``),
    so an interrupted run leaves a valid file.

    Parameters
    ----------
    path_csv : str or path-like
        Where to write the CSV (its directory must exist).

    Examples
    --------
    >>> rec = ThetaRFlowRecorder("run/theta_r_flow.csv")      # doctest: +SKIP
    >>> for epoch in range(epochs):                            # doctest: +SKIP
    ...     grads = ...  # the model's per-layer gradients this epoch
    ...     rec.record(epoch, model, graph, x, grads)
    >>> rec.plot("run/theta_r_flow.png")                       # doctest: +SKIP
    """

    BASE_COLUMNS = ["epoch", "layer", "dead_fraction", "attention_dead_fraction"] + [
        f"frac_{c}" for c in CAUSES
    ]
    #: Parameters whose gradient norm is plotted (all of them are in the CSV).
    PLOT_GRADS = ("W_r", "W_l", "att", "W_n")

    def __init__(self, path_csv):
        self.path_csv = os.fspath(path_csv)
        directory = os.path.dirname(os.path.abspath(self.path_csv))
        if not os.path.isdir(directory):
            raise ValueError(f"path_csv must be in an existing directory, got {self.path_csv!r}")
        self.rows = []

    @property
    def path(self):
        """The CSV path (same as ``path_csv``)."""
        return self.path_csv

    def fit_callback(self, dataset=None):
        """Return a ``callback(epoch, model, grads, row)`` for :func:`gatfast.fit`.

        Note that ``fit`` calls back after the optimizer step, so the mask
        describes the updated parameters while the norms are those of the
        step's gradients.

        Parameters
        ----------
        dataset : NodeDataset, optional
            Node datasets: pass it; its whole graph is diagnosed. Graph
            datasets: leave it out; ``fit`` passes the epoch's first training
            batch in ``row["graph"]``/``row["x"]``.

        Returns
        -------
        callable
            The callback, which calls :meth:`record`.
        """

        def callback(epoch, model, grads, row):
            if "graph" in row:
                graph, x, edge_attr = row["graph"], row["x"], row.get("edge_attr")
            elif dataset is not None:
                graph, x, edge_attr = dataset.graph, dataset.x, dataset.edge_attr
            else:
                raise ValueError("pass the NodeDataset to fit_callback(dataset) for node-level training")
            self.record(epoch, model, graph, x, grads, edge_attr=edge_attr)

        return callback

    def record(self, epoch, model, graph, x, grads=None, edge_attr=None):
        """Diagnose ``model`` on ``(graph, x)`` and append the rows for ``epoch``.

        Parameters
        ----------
        epoch : int
            The epoch, recorded in the rows.
        model : GATv2Network or GATv2Layer
            A network with ``layers`` (see :func:`theta_r_flow_network`) or one layer.
        graph, x : CSRGraph and ndarray
            The graph and features to diagnose (e.g. the training batch).
        grads : dict or list of dict, optional
            The gradients of this epoch, for their norms.
        edge_attr : ndarray, optional
            The edge features of ``graph`` (CSR order), for models with ``edge_dim``.

        Returns
        -------
        list of ThetaRFlow
            One per attention layer.
        """
        if isinstance(model, GATv2Layer):
            flows = [theta_r_flow(model, graph, x, grads=grads, edge_attr=edge_attr)]
        else:
            flows = theta_r_flow_network(model, graph, x, grads, edge_attr=edge_attr)
        for k, flow in enumerate(flows):
            row = {"epoch": int(epoch), "layer": k}
            row.update(flow.summary())
            self.rows.append(row)
        self._write()
        return flows

    @property
    def columns(self):
        """The CSV's columns: the base columns, then every other key recorded so far."""
        extra = []
        for row in self.rows:
            for key in row:
                if key not in self.BASE_COLUMNS and key not in extra:
                    extra.append(key)
        return self.BASE_COLUMNS + extra

    def _write(self):
        cols = self.columns

        def write(f):
            writer = csv.DictWriter(f, fieldnames=cols, restval="", lineterminator="\n")
            writer.writeheader()
            for row in self.rows:
                writer.writerow({k: _fmt(v) for k, v in row.items()})

        atomic_write(self.path_csv, write, text=True)

    def plot(self, path_png):
        """Plot the dead fraction and the gradient norms over epochs (needs matplotlib).

        Parameters
        ----------
        path_png : str or path-like
            The image to write (atomically); its directory must exist.
        """
        if not self.rows:
            raise ValueError("nothing recorded yet: call record() before plot()")
        plt = pyplot()
        layers = sorted({r["layer"] for r in self.rows})
        fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
        for k in layers:
            rows = [r for r in self.rows if r["layer"] == k]
            ep = [r["epoch"] for r in rows]
            ax0.plot(ep, [r["dead_fraction"] for r in rows], label=f"layer {k}")
            for key in rows[0]:
                if key.startswith("grad_norm_") and key[len("grad_norm_") :] in self.PLOT_GRADS:
                    ax1.plot(
                        ep,
                        [max(r.get(key, np.nan), 1e-30) for r in rows],
                        label=f"layer {k} {key[len('grad_norm_') :]}",
                    )
        ax0.set_xlabel("epoch")
        ax0.set_ylabel("dead Θ_R fraction (node, head, channel)")
        ax0.set_ylim(-0.02, 1.02)
        ax0.legend()
        ax1.set_xlabel("epoch")
        ax1.set_ylabel("gradient norm")
        ax1.set_yscale("log")
        ax1.legend(fontsize="small", ncol=2)
        fig.tight_layout()
        atomic_save_figure(fig, path_png)
        plt.close(fig)


def _fmt(v):
    if isinstance(v, float):
        return repr(v)
    return v
