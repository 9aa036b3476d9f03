"""MXNet's operator functions, compiled once instead of at every import.

``import mxnet`` writes the Python source of a function for each of its operators
(``mx.nd.dot``, ``mx.sym.FullyConnected``, ``mx.np.sum`` ...: 2,556 functions) and compiles
each with ``exec``. Every process pays it: each command-line run, each worker of a
``launch``, each test that starts one. Built from this file instead, the import took 0.92
CPU-seconds against 1.71 (docs/architecture.md, "Importing the package").

This module keeps the compiled code of those functions in one file beside MXNet's own
bytecode (``mxnet/__pycache__/``) and builds the functions from it. Nothing else about
them changes: the same code objects, globals, defaults and docstrings as the ones MXNet
makes, except the operator's handle (an address in ``libmxnet.so``, different in each
process), which is set to this process's. An operator whose function does not have the
expected form is made by MXNet as before; so is every one when the file is missing or
unreadable (then it is written again). Another MXNet, Python or ``libmxnet.so`` has a file
of its own: the name is a hash of what the functions' code depends on.

``bbb_gluon`` turns this on at its own import, when MXNet is not imported yet; set
``BBB_GLUON_OP_CACHE=off`` to leave MXNet's import as it is, or to a folder to keep the
file there instead. The file is written whatever ``PYTHONDONTWRITEBYTECODE`` says (it is
not Python's bytecode, and machines that set it, as the CI machines do, would otherwise
never have it); where the folder cannot be written, nothing is.
"""

import hashlib
import importlib.abc
import importlib.machinery
import inspect
import marshal
import os
import sys
import types

_FORMAT = 1
_NULL, _NONE = 1, 0  # how a default is stored: MXNet's _Null sentinel or None

# What this process did, for the tests: functions built from the file, and made by MXNet.
served = []  # (make_op_func, op name, function name, the function)
made = [0]


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``mxnet`` once, as Python would, and runs :func:`_prepare` before the package's
    ``__init__`` and the cache's ``save`` after it."""

    def find_spec(self, name, path, target=None):
        if name != "mxnet":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_with_cache(module):
            cache = _prepare()  # before the package's __init__ loads the operators
            exec_module(module)
            if cache is not None:
                cache.save()

        spec.loader.exec_module = exec_with_cache
        return spec


def install():
    """Use the file for the next ``import mxnet`` of this process (if it comes first)."""
    if os.environ.get("BBB_GLUON_OP_CACHE", "").lower() in ("off", "0", "no"):
        return
    if "mxnet" in sys.modules or any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())


def _prepare():
    """Import ``mxnet.base`` (the first module MXNet's ``__init__`` loads, and one that loads
    no other of its modules) and wrap its two operator registrations; ``None`` where that
    fails, and MXNet's import goes on as it would have."""
    try:
        base = importlib.import_module("mxnet.base")
        # readable as MXNet's own bytecode is: the mode of its source, as Python gives a .pyc
        cache = _Cache(_path(base), os.stat(base.__file__).st_mode & 0o666)
        base._init_op_module = cache.wrap(base._init_op_module)
        base._init_np_op_module = cache.wrap(base._init_np_op_module)
        return cache
    except Exception:  # noqa: BLE001 - a cache must never be why MXNet does not import
        return None


def _path(base):
    """The file for this MXNet, ``libmxnet.so`` and Python: named by a hash of what the
    functions' code depends on."""
    package = os.path.dirname(base.__file__)
    parts = [str(_FORMAT), sys.implementation.cache_tag or "", sys.version]
    for path in (base._LIB._name, base.__file__, os.path.join(package, "ndarray", "register.py"),
                 os.path.join(package, "symbol", "register.py")):
        stat = os.stat(path)
        parts += [os.path.realpath(path), str(stat.st_size), str(stat.st_mtime_ns)]
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    folder = os.environ.get("BBB_GLUON_OP_CACHE") or os.path.join(package, "__pycache__")
    return os.path.join(folder, f"bbb_gluon_ops.{digest}.marshal")


class _Cache:
    def __init__(self, path, mode=0o644):
        self.path, self.mode = path, mode
        try:
            with open(path, "rb") as f:
                self.entries = marshal.load(f)
            if not isinstance(self.entries, dict):
                raise ValueError
        except (OSError, EOFError, ValueError, TypeError):
            self.entries = {}
        self.new = {}

    def wrap(self, init):
        """``init`` (MXNet's ``_init_op_module`` or ``_init_np_op_module``), called with a
        ``make_op_func`` that serves each function from the file where it can."""
        signature = inspect.signature(init)

        def init_from_cache(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.arguments["make_op_func"] = self._maker(bound.arguments["make_op_func"])
            return init(*bound.args, **bound.kwargs)

        return init_from_cache

    def _maker(self, make):
        null = make.__globals__["_Null"]

        def make_op_func(handle, name, func_name):
            key = f"{make.__name__}:{name}:{func_name}"
            function = _build(self.entries.get(key), handle.value, make.__globals__, null)
            if function is not None:
                served.append((make, name, func_name, function))
                return function
            function = make(handle, name, func_name)
            made[0] += 1
            entry = _entry(function, handle.value, null)
            if entry is not None:
                self.new[key] = entry
            return function

        return make_op_func

    def save(self):
        """Write the file again where this import made a function it did not hold."""
        if not self.new:
            return
        # MXNet's import is done by now, so the package's writer (which needs MXNet) can run:
        # whole or not at all, for processes started at the same moment.
        from .._files import atomic_write

        def write(tmp):
            with open(tmp, "wb") as f:
                marshal.dump({**self.entries, **self.new}, f)
            os.chmod(tmp, self.mode)

        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            atomic_write(self.path, write)
        except (OSError, ValueError):
            pass  # a folder it cannot write (or what marshal cannot): as slow as without it


def _entry(function, handle, null):
    """What the file holds of ``function``, or ``None`` if it has not the form MXNet's
    generated functions have: the handle once among its constants (and not inside a tuple
    of them, where it would not be replaced), no closure, no nested code, defaults that are
    ``None`` or ``_Null``."""
    code = function.__code__
    if function.__closure__ or any(isinstance(c, types.CodeType) for c in code.co_consts):
        return None
    if [type(c) is int and c == handle for c in code.co_consts].count(True) != 1 or \
            any(handle in _nested_ints(c) for c in code.co_consts if type(c) is not int):
        return None
    defaults = _defaults_spec(function.__defaults__ or (), null)
    kwdefaults = _defaults_spec((function.__kwdefaults__ or {}).values(), null)
    if defaults is None or kwdefaults is None:
        return None
    return (code, handle, defaults, tuple(function.__kwdefaults__ or ()), kwdefaults,
            function.__doc__, function.__name__, function.__module__)


def _nested_ints(const):
    if isinstance(const, tuple | frozenset):
        return {i for c in const for i in ([c] if type(c) is int else _nested_ints(c))}
    return set()


def _defaults_spec(values, null):
    spec = tuple(_NULL if v is null else _NONE if v is None else -1 for v in values)
    return None if -1 in spec else spec


def _build(entry, handle, globals_, null):
    """The function ``entry`` describes, with this process's ``handle``; ``None`` if there
    is no entry or it is not one this module wrote."""
    try:
        code, old, defaults, kwnames, kwdefaults, doc, name, module = entry
        consts = tuple(handle if type(c) is int and c == old else c for c in code.co_consts)
        function = types.FunctionType(code.replace(co_consts=consts), globals_, name,
                                      tuple(null if d == _NULL else None for d in defaults)
                                      or None)
        if kwnames:
            function.__kwdefaults__ = {k: null if d == _NULL else None
                                       for k, d in zip(kwnames, kwdefaults, strict=True)}
        function.__doc__, function.__module__ = doc, module
        return function
    except (TypeError, ValueError, AttributeError):  # None, or not our tuple
        return None
