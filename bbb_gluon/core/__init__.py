"""The algorithm: priors, the posterior over chosen parameters, putting sampled weights into
a network, the loss, and one training step.

Nothing here imports from the rest of the package except the kernels behind
``bbb_gluon._kernels`` (the step's fast engine) and the small helpers ``_checks`` and
``_files``: the layers above (training, prediction, pruning, the bandit, the command line)
build on this one, never the other way round (docs/architecture.md).
"""
