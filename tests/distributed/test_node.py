"""Tests for ``bbb_gluon/distributed/node.py``, the scheduler and servers that skip MXNet's
Python import (their runs are in test_distributed.py)."""

import os
import subprocess
import sys

import mxnet as mx

from bbb_gluon.distributed import node


def test_it_loads_the_library_mxnet_itself_loaded():
    assert os.path.samefile(node.library_path(), mx.base._LIB._name)


def _run_node(role):
    # As launch starts it, with -X importtime: what it imports, on stderr.
    env = {**os.environ, "DMLC_ROLE": role}
    return subprocess.run([sys.executable, "-X", "importtime", "-m",
                           "bbb_gluon.distributed.node"], env=env, capture_output=True,
                          text=True, timeout=60)


def test_a_worker_role_is_refused_with_one_line_and_nothing_of_mxnet_is_imported():
    done = _run_node("worker")
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert lines == ["node.py runs a scheduler or a server: DMLC_ROLE is 'worker'"]
    loaded = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
              if line.startswith("import time:")]
    assert "bbb_gluon.distributed" in loaded  # (node itself runs as __main__)
    assert not [m for m in loaded if m.split(".")[0] in ("mxnet", "numpy")]
    assert not [m for m in loaded if m.startswith("bbb_gluon.") and m not in (
        "bbb_gluon._mxnet_build", "bbb_gluon.distributed", "bbb_gluon.distributed.node",
        "bbb_gluon._kernels", "bbb_gluon._kernels.op_cache")]  # the last two: stdlib only
