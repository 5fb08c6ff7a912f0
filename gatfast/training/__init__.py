"""Training: the options (one dataclass), the loop, evaluation, splits and checkpoints."""

from .checkpoint import load_checkpoint, save_checkpoint
from .config import PRESETS, TrainConfig, preset_for
from .errors import TrainingDiverged, WorkersLost
from .evaluation import evaluate
from .loop import TrainResult, fit
from .run import build_model, train

__all__ = [
    "PRESETS",
    "TrainConfig",
    "TrainResult",
    "TrainingDiverged",
    "WorkersLost",
    "build_model",
    "evaluate",
    "fit",
    "load_checkpoint",
    "preset_for",
    "save_checkpoint",
    "train",
]
