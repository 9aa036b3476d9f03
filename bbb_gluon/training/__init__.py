"""Training: ``fit`` for Bayes by Backprop and its plain and dropout baselines.

``config`` says what a run is (``TrainConfig``), ``model`` builds the network it names,
``loop`` runs it (``fit``), ``checkpoint`` writes and reads the run folder (``load_run``),
``guards`` stop it at a Ctrl-C or when it diverges, and ``history`` keeps its record.
"""

from .checkpoint import CheckpointError, load_run
from .config import MODELS, TrainConfig
from .guards import TrainingDiverged, TrainingInterrupted
from .loop import TrainResult, fit
from .model import build_mlp

__all__ = ["TrainConfig", "TrainResult", "fit", "build_mlp", "load_run",
           "CheckpointError", "TrainingInterrupted", "TrainingDiverged", "MODELS"]
