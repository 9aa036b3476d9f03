"""README's code runs as written: its first example on the fused path."""

import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

from bbb_gluon._kernels import fused

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_examples_run_and_the_first_takes_the_fast_path():
    blocks = python_blocks()
    assert len(blocks) >= 2
    namespace = {}
    exec(compile(blocks[0], "README.md example 1", "exec"), namespace)
    step, costs = namespace["step"], namespace["costs"]
    nll, complexity = costs.nll, costs.complexity
    if not fused.available():
        msg = f"fused kernels unavailable: {fused.unavailable_reason()}"
        if os.environ.get("BBB_GLUON_REQUIRE_FUSED"):
            pytest.fail(msg)
        pytest.skip(msg)
    assert step.engine == "fused"
    assert math.isfinite(nll.asscalar()) and complexity.asscalar() > 0
    # the cost the step followed is the likelihood cost plus C over the 391 batches
    assert costs.cost.asscalar() == pytest.approx(
        nll.asscalar() + complexity.asscalar() / 391, rel=1e-5)
    # one Trainer trained BatchNorm's gamma too
    gamma = namespace["net"][1].gamma.data().asnumpy()
    assert (gamma != 1).any()
    for i, block in enumerate(blocks[1:], start=2):
        before = [m.asnumpy().copy() for m in namespace["posterior"].mu()]
        exec(compile(block, f"README.md example {i}", "exec"), namespace)
        if "predict_intervals" in block:  # the regression's: a network of its own
            bars, (lower, upper) = namespace["bars"], namespace["bars"].intervals[0.9]
            assert bars.mean.shape == (200, 1) and np.all(lower < bars.mean)
            assert np.all(bars.mean < upper) and np.all(bars.noise_std > 0)
            continue
        after = namespace["posterior"].mu()
        assert any((a.asnumpy() != b).any() for a, b in zip(after, before, strict=True)), i
    history = namespace["result"].history
    assert len(history) == 1 and math.isfinite(history[0]["cost"])
