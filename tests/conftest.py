import os
import random
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same random state, whatever ran before it."""
    random.seed(0)
    np.random.seed(0)
    mx.random.seed(0)
    yield


def _data_root():
    root = os.environ.get("BBB_GLUON_DATA")
    return Path(root) if root else None


@pytest.fixture(scope="session")
def data_root():
    """The offline dataset folder; skip (or fail in CI) when it is missing."""
    root = _data_root()
    if root is None or not (root / "mnist").is_dir():
        msg = "real MNIST files not found: set BBB_GLUON_DATA (see README)"
        if os.environ.get("BBB_GLUON_REQUIRE_DATA"):
            pytest.fail(msg)
        pytest.skip(msg)
    return root


@pytest.fixture(scope="session")
def fashion_root(data_root):
    if not (data_root / "fashion-mnist").is_dir():
        msg = "Fashion-MNIST not found: apt-get install -y dataset-fashion-mnist (see README)"
        if os.environ.get("BBB_GLUON_REQUIRE_DATA"):
            pytest.fail(msg)
        pytest.skip(msg)
    return data_root


@pytest.fixture(scope="session")
def mushroom_root():
    """The data folder holding mushroom/; skip (or fail in CI) when it is missing."""
    root = _data_root()
    if root is None or not (root / "mushroom" / "agaricus-lepiota.data").is_file():
        msg = "UCI Mushroom not found: link ../shared/data/mushroom (make data; see README)"
        if os.environ.get("BBB_GLUON_REQUIRE_DATA"):
            pytest.fail(msg)
        pytest.skip(msg)
    return root


@pytest.fixture(scope="module")
def fused_kernels():
    """The compiled kernels; skip (or fail in CI) when they cannot be built here."""
    from bbb_gluon import fused

    if not fused.available():
        msg = f"fused kernels unavailable: {fused.unavailable_reason()}"
        if os.environ.get("BBB_GLUON_REQUIRE_FUSED"):
            pytest.fail(msg)
        pytest.skip(msg)
