import ctypes
import os
import random
import time
from pathlib import Path

import mxnet as mx
import numpy as np
import psutil
import pytest

# The package, as a user's program imports it (it runs no operator and claims no threads:
# the tests run at MXNet's own thread count unless they claim).
import bbb_gluon  # noqa: F401


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
        msg = "real MNIST files not found: set BBB_GLUON_DATA (see docs/data.md)"
        if os.environ.get("BBB_GLUON_REQUIRE_DATA"):
            pytest.fail(msg)
        pytest.skip(msg)
    return root


@pytest.fixture(scope="session")
def fashion_root(data_root):
    if not (data_root / "fashion-mnist").is_dir():
        msg = "Fashion-MNIST not found: apt-get install -y dataset-fashion-mnist (see docs/data.md)"
        if os.environ.get("BBB_GLUON_REQUIRE_DATA"):
            pytest.fail(msg)
        pytest.skip(msg)
    return data_root


@pytest.fixture(scope="session")
def mushroom_root():
    """The data folder holding mushroom/; skip (or fail in CI) when it is missing."""
    root = _data_root()
    if root is None or not (root / "mushroom" / "agaricus-lepiota.data").is_file():
        msg = "UCI Mushroom not found: link ../shared/data/mushroom (make data; see docs/data.md)"
        if os.environ.get("BBB_GLUON_REQUIRE_DATA"):
            pytest.fail(msg)
        pytest.skip(msg)
    return root


@pytest.fixture(scope="session")
def uci_root():
    """The data folder holding uci/; skip (or fail in CI) when it is missing."""
    root = _data_root()
    if root is None or not (root / "uci" / "bostonHousing" / "data.txt").is_file():
        msg = "the UCI regression data not found: link ../shared/data/uci (make data)"
        if os.environ.get("BBB_GLUON_REQUIRE_DATA"):
            pytest.fail(msg)
        pytest.skip(msg)
    return root


@pytest.fixture(scope="module")
def fused_kernels():
    """The compiled kernels; skip (or fail in CI) when they cannot be built here."""
    from bbb_gluon._kernels import fused

    if not fused.available():
        msg = f"fused kernels unavailable: {fused.unavailable_reason()}"
        if os.environ.get("BBB_GLUON_REQUIRE_FUSED"):
            pytest.fail(msg)
        pytest.skip(msg)


# --------------------------------------------------------------------------- scheduling

def pytest_collection_modifyitems(config, items):
    # The tests marked slow (tens of seconds: sweeps, launches, benchmarks' smoke runs)
    # first, so that a session spread over workers ends on short tests, all of its
    # workers finishing together. (Under `make test` the notebooks go before them: xdist
    # hands out its largest units of work, the notebooks, first.)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: pytest -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    # `make test` runs tests/ and the notebooks in one pytest-xdist session with --dist
    # loadgroup: a notebook's cells share one kernel, so each notebook is one unit of work
    # (its cells in order on one worker); every other test is a unit of its own. (The
    # xdist_group mark would say so, but xdist 3.8 cannot rename pytest 9's node ids.)
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class NotebookScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            return path if path.endswith(".ipynb") else super()._split_scope(nodeid)

    return NotebookScheduling(config, log)


# --------------------------------------------------------------------------- processes

_PR_SET_CHILD_SUBREAPER = 36


def pytest_configure(config):
    # Orphans of what a test starts (a launcher's workers once the launcher has died) come
    # back to this process instead of init, so the check below finds them.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _descendants():
    try:
        return {p.pid: p for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return {}


def _reap(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


@pytest.fixture(autouse=True)
def _no_process_left():
    """Every process a test starts is gone when it ends, on failure and time-out too:
    what is left after a short grace is killed, and the test fails naming it."""
    before = set(_descendants())
    yield
    deadline = time.monotonic() + 10
    while True:
        left = {pid: p for pid, p in _descendants().items() if pid not in before}
        running = []
        for pid, p in left.items():
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    _reap(pid)
                else:
                    running.append(p)
            except psutil.Error:
                pass
        if not running or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if running:
        described = []
        for p in running:
            try:
                described.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
                p.kill()
            except psutil.Error:
                continue
        psutil.wait_procs(running, timeout=5)
        for p in running:
            _reap(p.pid)
        pytest.fail("the test left processes running (now killed):\n" + "\n".join(described))


# --------------------------------------------------------------------------- disk faults


@pytest.fixture
def failing_disk(monkeypatch):
    """``failing_disk(suffix, nth=1, error=errno.ENOSPC)``: the nth atomic write of a file
    whose path ends with ``suffix`` fails half-way, as a full disk (or EIO) makes it fail:
    the temporary file exists and is partly written when the error comes."""
    import errno

    from bbb_gluon import _files

    real = _files.atomic_write
    plans = []

    def atomic(path, write, suffix=""):
        for plan in plans:
            if str(path).endswith(plan["suffix"]):
                plan["seen"] += 1
                if plan["seen"] == plan["nth"]:
                    def broken(tmp, code=plan["error"]):
                        with open(tmp, "wb") as f:
                            f.write(b"partial")
                        raise OSError(code, os.strerror(code))
                    return real(path, broken, suffix)
        return real(path, write, suffix)

    monkeypatch.setattr(_files, "atomic_write", atomic)

    def fail(suffix, nth=1, error=errno.ENOSPC):
        plans.append({"suffix": suffix, "nth": nth, "error": error, "seen": 0})

    return fail
