import json
import subprocess
import sys

import pytest

# In a fresh process: load the kernels' library one way or the other, then describe every
# function of theirs that MXNet's modules hold, and run one of them.
PROBE = """
import json, sys
import mxnet as mx
from bbb_gluon._kernels import private
path, how = sys.argv[1], sys.argv[2]
if how == "mxnet":
    mx.library.load(path, verbose=False)
else:
    private.load_operator_library(path)
found = {}
for name in ("ndarray", "ndarray.op", "ndarray._internal", "symbol", "symbol.op",
             "symbol._internal"):
    module = sys.modules["mxnet." + name]
    found[name] = {key: [f.__name__, f.__module__, f.__doc__, module.__all__.count(key)]
                   for key in dir(module) if "bbb_" in key
                   for f in [getattr(module, key)]}
w = mx.nd.bbb_sample(mx.nd.array([0.5, -1.0]), mx.nd.array([-3.0, 0.0]),
                     mx.nd.array([1.0, 2.0]))
found["bbb_sample"] = w.asnumpy().tolist()
print(json.dumps(found))
"""


def test_the_kernels_library_loads_as_mxnet_would_load_it(fused_kernels):
    from bbb_gluon._kernels import fused

    seen = {}
    for how in ("mxnet", "ours"):
        done = subprocess.run([sys.executable, "-c", PROBE, fused.library_path(), how],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        seen[how] = json.loads(done.stdout)
    assert seen["ours"] == seen["mxnet"]
    # The operators, their backward and both front ends are all there.
    assert "bbb_update_layers" in seen["ours"]["ndarray"]
    assert "bbb_update_layers" in seen["ours"]["symbol"]
    assert "_backward_bbb_flip" in seen["ours"]["symbol._internal"]
    assert seen["ours"]["bbb_sample"] == pytest.approx([0.5 + 0.04858735, -1.0 + 1.3862944])


def test_a_library_path_that_is_not_a_file_is_refused(tmp_path):
    from mxnet.base import MXNetError

    from bbb_gluon._kernels import private

    (tmp_path / "notes.txt").write_text("not a library")
    for path in (tmp_path / "missing.so", "relative.so", tmp_path, tmp_path / "notes.txt"):
        with pytest.raises(MXNetError, match="not an existing absolute path"):
            private.load_operator_library(path)
