"""Training: ``fit`` for Bayes by Backprop and its plain and dropout baselines.

``config`` says how a run trains (``TrainConfig``), ``model`` what it trains (``MLP``, a
network of your own as ``Network``), ``options`` the rarer settings (``RunOptions``),
``prepare`` checks the input and sets the run up, ``loop`` runs it (``fit``), ``checkpoint``
writes and reads the run folder (``load_run``), ``guards`` stop it at a Ctrl-C or when it
diverges, ``history`` keeps its record, and ``progress`` shows it as it goes. A finished
run's report (``write_report``) is :mod:`bbb_gluon.reports`'.
"""

from .checkpoint import CheckpointError, UnreadableCheckpointError, load_run
from .config import MODELS, RECIPES, REGRESSION_DEFAULTS, TrainConfig
from .guards import TrainingDiverged, TrainingInterrupted
from .loop import TrainResult, fit
from .network import MLP, Network, build_mlp
from .options import RunOptions

__all__ = ["TrainConfig", "TrainResult", "fit", "build_mlp", "MLP", "Network", "RunOptions",
           "load_run",
           "CheckpointError", "UnreadableCheckpointError", "TrainingInterrupted",
           "TrainingDiverged", "MODELS", "RECIPES", "REGRESSION_DEFAULTS"]
