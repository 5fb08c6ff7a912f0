"""Layers: parameters, forward and closed-form backward over the kernels."""

from .cache import LayerCache
from .gatv2 import ROOT_WEIGHTS, THETA_R_FORMS, GATv2Layer
from .init import glorot
from .params import ParamDict

__all__ = ["GATv2Layer", "LayerCache", "ParamDict", "ROOT_WEIGHTS", "THETA_R_FORMS", "glorot"]
