"""Diagnostics: Θ_R gradient flow, finite-difference checks and the packaged experiments."""

from .gradcheck import gradcheck_layer, random_block, random_graph
from .network import flows_from_model_cache, theta_r_flow_network
from .recorder import ThetaRFlowRecorder
from .theta_r import CAUSES, ThetaRFlow, structural_zero_causes, theta_r_flow, theta_r_flow_from_cache

__all__ = [
    "CAUSES",
    "ThetaRFlow",
    "ThetaRFlowRecorder",
    "flows_from_model_cache",
    "gradcheck_layer",
    "random_block",
    "random_graph",
    "structural_zero_causes",
    "theta_r_flow",
    "theta_r_flow_from_cache",
    "theta_r_flow_network",
]
