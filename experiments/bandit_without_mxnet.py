"""`bbb-gluon bandit` on a machine where MXNet 1.9.1 cannot be installed (Python 3.12 and
NumPy 2, as on the lent 16-core machines the bandit probes ran on).

The stacked engine (bbb_gluon/_kernels/bandit.cc) needs only NumPy and a C++ compiler;
the package imports MXNet at module level for everything else, so this script puts a
stand-in module in its place before importing the command line. Anything that really
calls MXNet (the Gluon agents, training) does nothing useful under it: use this for
`bandit` alone.

    python experiments/bandit_without_mxnet.py bandit --out runs/probe --steps 10000 ...
"""
import sys
import tempfile
import types
from pathlib import Path


class _AnyMeta(type):
    def __getattr__(cls, name):
        return _Any


class _Any(metaclass=_AnyMeta):
    """Stands for any MXNet name: callable, subclassable, every attribute another _Any."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return _Any

    def __call__(self, *args, **kwargs):
        return _Any()


class _StandIn(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any


_ROOT = Path(tempfile.mkdtemp(prefix="mxnet-stand-in-"))
for _name in ("mxnet", "mxnet.gluon", "mxnet.gluon.nn", "mxnet.gluon.loss", "mxnet.gluon.data",
              "mxnet.gluon.parameter", "mxnet.autograd", "mxnet.ndarray", "mxnet.nd",
              "mxnet.operator", "mxnet.base", "mxnet.optimizer", "mxnet.kvstore",
              "mxnet.context", "mxnet.initializer", "mxnet.io", "mxnet.library"):
    sys.modules[_name] = _StandIn(_name)
sys.modules["mxnet"].__version__ = "1.9.1 (stand-in)"
sys.modules["mxnet"].__file__ = str(_ROOT / "mxnet" / "__init__.py")  # for the build cache

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bbb_gluon.cli.main import main

    sys.exit(main(sys.argv[1:]))
