"""Bayes by Backprop for Apache MXNet Gluon.

Blundell, Cornebise, Kavukcuoglu and Wierstra, "Weight Uncertainty in Neural
Networks", ICML 2015 (arXiv:1505.05424).
"""

__version__ = "0.1.0"
