"""The compiled C++ kernels and what they need from MXNet: building and loading them
(``fused``), the thread counts they run with (``threads``), and their sources
(``fused.cc`` for training and prediction, ``bandit.cc`` for the Mushroom bandit's stacked
engine).
"""
