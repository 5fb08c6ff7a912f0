"""The parser of the ``gatfast`` command: one subcommand per command."""

from __future__ import annotations

from .options import Parser, add_train_options, positive_float, positive_int

__all__ = ["build_parser"]


def build_parser():
    """The argument parser of the ``gatfast`` command, one subcommand per command.

    Returns
    -------
    Parser
        An :class:`argparse.ArgumentParser` whose parsed ``command`` names the
        subcommand (``train``, ``sweep``, ``evaluate``, ``gradcheck`` or ``experiment``).
    """
    parser = Parser(
        prog="gatfast",
        description="Train GATv2 graph attention networks on sparse graphs on the CPU, "
        "with closed-form gradients in Numba kernels.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    p = sub.add_parser(
        "train",
        help="train a model (default: the embedded karate club)",
        description="Train a GATv2 network and print per-epoch progress and the final "
        "metrics. With no options: the karate club, the GAT recipe.",
    )
    add_train_options(p)

    sw = sub.add_parser(
        "sweep",
        help="train a grid of configurations, as tasks on a Dask cluster",
        description="Train one model per combination of the --grid values (each a one-process "
        "run; with --workers N or --scheduler ADDRESS as tasks on a Dask cluster: pip "
        "install gatfast[distributed]) and print a table of their final metrics.",
    )
    sw.add_argument(
        "--grid",
        nargs="+",
        action="append",
        required=True,
        metavar=("OPTION", "VALUE"),
        help="an option and the values to try, e.g. --grid lr 0.01 0.005 --grid fanout 10,10 5,5 "
        "(repeat for more options; every combination is trained)",
    )
    sw.add_argument("--csv", metavar="PATH", help="also write the table, every metric, as CSV")
    add_train_options(sw)

    e = sub.add_parser(
        "evaluate",
        help="evaluate a saved model on a dataset",
        description="Load a checkpoint written by 'gatfast train --save' and print its metrics.",
    )
    e.add_argument("checkpoint", help="path of the .npz checkpoint")
    e.add_argument(
        "--dataset",
        default=None,
        help="dataset to evaluate on (default: the one the model was trained on, if it is "
        "'karate' or the file still exists)",
    )
    e.add_argument("--metrics-json", metavar="PATH", help="write the metrics as JSON")
    e.add_argument("--threads", type=positive_int, help="Numba threads")
    norm = e.add_mutually_exclusive_group()
    norm.add_argument(
        "--normalize-features",
        dest="normalize_features",
        action="store_const",
        const=True,
        default=None,
        help="row-normalise the features (default: as the checkpoint records; "
        "required when it records nothing)",
    )
    norm.add_argument(
        "--no-normalize-features",
        dest="normalize_features",
        action="store_const",
        const=False,
        help="use the raw features (default: as the checkpoint records)",
    )

    gc = sub.add_parser(
        "gradcheck",
        help="finite-difference check of every gradient on a random graph",
        description="Compare the closed-form gradients of a float64 layer with central "
        "finite differences; prints the worst relative error.",
    )
    gc.add_argument("--nodes", type=positive_int, default=12, help="nodes of the random graph (>= 2)")
    gc.add_argument(
        "--in-features", type=positive_int, default=5, help="input features per node (default: 5)"
    )
    gc.add_argument("--out-features", type=positive_int, default=4, help="channels per head (default: 4)")
    gc.add_argument("--heads", type=positive_int, default=2, help="attention heads (default: 2)")
    gc.add_argument("--mean", action="store_true", help="average the heads instead of concatenating")
    gc.add_argument(
        "--theta-r",
        choices=["linear", "pairwise"],
        default="linear",
        help="form of the Θ_R gradient term to check (default: linear)",
    )
    gc.add_argument(
        "--attention-activation",
        choices=["leaky_relu", "softplus"],
        default="leaky_relu",
        help="activation inside the attention score (softplus: GAT+)",
    )
    gc.add_argument(
        "--root-weight",
        choices=["theta_r", "theta_n"],
        default=None,
        help="GAT+ root weight instead of self loops in the attention",
    )
    gc.add_argument(
        "--edge-dim",
        type=positive_int,
        default=None,
        help="check edge features too: D random attributes per edge (default: none)",
    )
    gc.add_argument(
        "--bipartite",
        action="store_true",
        help="check a bipartite layer on a block of --nodes targets reading --nodes + 3 sources",
    )
    gc.add_argument("--seed", type=int, default=0, help="seed of the random graph, features and weights")
    gc.add_argument(
        "--tolerance",
        type=positive_float,
        default=1e-6,
        help="exit with status 1 if the worst relative error exceeds this",
    )

    ex = sub.add_parser(
        "experiment",
        help="run a packaged experiment",
        description="Run a packaged experiment; 'pitfall' compares GATv2 and the GAT+ "
        "variants on small sparse graphs.",
    )
    ex.add_argument("name", choices=["pitfall"], help="which experiment")
    ex.add_argument("--seeds", type=positive_int, default=10, help="training runs per variant")
    ex.add_argument("--quick", action="store_true", help="a small, fast version (for smoke tests)")
    ex.add_argument(
        "--out",
        default="runs/pitfall",
        help="directory for the CSV, Markdown table and plot (default: runs/pitfall; created if "
        "its parent exists)",
    )
    ex.add_argument(
        "--update-tracked",
        action="store_true",
        help="allow --out to be a directory with files tracked by git (the published results in "
        "docs/results/pitfall); refused otherwise",
    )
    ex.add_argument("--threads", type=positive_int, help="Numba threads")
    return parser
