"""Models: a stack of GATv2 layers with activations, dropout, readout and losses."""

from .activations import ACTIVATIONS, activation_backward, activation_forward
from .dropout import apply_dropout, dropout_backward, dropout_mask
from .linear import Linear, LinearCache
from .losses import accuracy, mse_loss, softmax_cross_entropy
from .network import READOUTS, GATv2Network, NetworkCache
from .pooling import POOL_MODES, PoolCache, global_pool, global_pool_backward

__all__ = [
    "ACTIVATIONS",
    "GATv2Network",
    "Linear",
    "LinearCache",
    "NetworkCache",
    "POOL_MODES",
    "PoolCache",
    "READOUTS",
    "accuracy",
    "activation_backward",
    "activation_forward",
    "apply_dropout",
    "dropout_backward",
    "dropout_mask",
    "global_pool",
    "global_pool_backward",
    "mse_loss",
    "softmax_cross_entropy",
]
