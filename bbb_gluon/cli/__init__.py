"""The ``bbb-gluon`` command: ``train``, ``evaluate``, ``prune``, ``compare``, ``weights``,
``bandit``, ``launch``, ``demo`` (and ``python -m bbb_gluon``).

One module per command (``train``, ``evaluate`` ...), each with its options
(``add_parser``, their defaults read from the library) and its run (``cmd_<command>``);
``parser`` assembles them, and ``main`` runs the command. Every user error (unknown
dataset, impossible hyperparameter, a folder that is not a run, a corrupt checkpoint,
missing data) ends with one line on stderr and exit status 2; nothing already on disk is
overwritten.
"""

from .main import main

__all__ = ["main"]
