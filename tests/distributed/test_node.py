"""Tests for ``bbb_gluon/distributed/node.py``, the scheduler and servers that skip MXNet's
Python import (their runs are in test_distributed.py)."""

import os
import subprocess
import sys

import mxnet as mx

from bbb_gluon.distributed import node


def test_it_loads_the_library_mxnet_itself_loaded():
    assert os.path.samefile(node.library_path(), mx.base._LIB._name)


def test_it_runs_alone_without_importing_the_package_or_mxnet():
    # As launch starts it: a file, whose imports must not pull in bbb_gluon or mxnet.
    probe = ("import runpy, sys; sys.argv = [sys.argv[1]]; "
             "runpy.run_path(sys.argv[0], run_name='probe'); "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('mxnet', 'bbb_gluon', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", probe, node.__file__], capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_a_worker_role_is_refused_with_one_line():
    env = {**os.environ, "DMLC_ROLE": "worker"}
    out = subprocess.run([sys.executable, node.__file__], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip() == "node.py runs a scheduler or a server: DMLC_ROLE is 'worker'"
