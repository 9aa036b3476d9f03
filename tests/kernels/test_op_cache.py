import json
import marshal
import os
import subprocess
import sys
import types

import pytest

from bbb_gluon._kernels import op_cache

# In a fresh process: import MXNet after bbb_gluon (the cache's way in), then describe
# every operator function its modules hold as a user sees it (the handle, an address that
# differs between processes, as "H"), and how many came from the file.
DESCRIBE = """
import hashlib, json, sys
import bbb_gluon
import mxnet as mx
from bbb_gluon._kernels import op_cache

null = mx.base._Null
def describe(f):
    code = f.__code__
    consts = tuple("H" if type(c) is int and c > 2 ** 32 else c for c in code.co_consts)
    return repr((code.co_code, consts, code.co_names, code.co_varnames, code.co_argcount,
                 code.co_flags, code.co_qualname,
                 ["_Null" if d is null else d for d in f.__defaults__ or ()],
                 f.__kwdefaults__, f.__doc__, f.__name__, f.__module__,
                 f.__globals__["__name__"]))

seen = {}
for name, module in sorted(sys.modules.items()):
    if name.startswith("mxnet"):
        for key, f in sorted(vars(module).items()):
            if getattr(getattr(f, "__code__", None), "co_filename", "") == "<string>":
                seen[name + "." + key] = hashlib.sha256(describe(f).encode()).hexdigest()
x = mx.nd.array([[1.0, 2.0], [3.0, 4.0]])
out = [mx.nd.dot(x, x).asnumpy().tolist(), mx.np.sum(x.as_np_ndarray()).item(),
       mx.sym.FullyConnected(mx.sym.var("x"), num_hidden=3).list_arguments()]
print(json.dumps({"functions": seen, "served": len(op_cache.served),
                  "made": op_cache.made[0], "out": out,
                  "finders": [type(f).__name__ for f in sys.meta_path]}))
"""


def _import(cache):
    done = subprocess.run([sys.executable, "-c", DESCRIBE], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "BBB_GLUON_OP_CACHE": str(cache)})
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return json.loads(done.stdout)


def _files(folder):
    return sorted(folder.glob("bbb_gluon_ops.*.marshal"))


@pytest.fixture(scope="module")
def first_import(tmp_path_factory):
    """A first import through an empty folder: it makes every function, as MXNet does, and
    writes the file."""
    folder = tmp_path_factory.mktemp("op_cache")
    return folder, _import(folder)


@pytest.mark.timeout(300)
def test_mxnet_imported_through_the_file_holds_the_functions_it_would_make(first_import):
    import mxnet

    folder, first = first_import
    assert first["served"] == 0 and first["made"] > 2000
    [path] = _files(folder)
    # readable as MXNet's bytecode is (a temporary file would be the owner's only)
    assert path.stat().st_mode & 0o777 == os.stat(mxnet.base.__file__).st_mode & 0o666
    again = _import(folder)
    assert again["served"] == first["made"] and again["made"] == 0
    without = _import("off")
    assert without["served"] == without["made"] == 0
    assert len(without["functions"]) > 2000
    assert again["functions"] == first["functions"] == without["functions"]
    assert again["out"] == without["out"] == [[[7.0, 10.0], [15.0, 22.0]], 10.0,
                                              ["x", "fullyconnected0_weight",
                                               "fullyconnected0_bias"]]
    assert "_Finder" not in again["finders"]  # gone once it has found MXNet


@pytest.mark.timeout(300)
@pytest.mark.parametrize("damage", [b"", "truncated", "a list"])
def test_a_damaged_file_is_made_again(first_import, tmp_path, damage):
    [whole] = _files(first_import[0])
    path = tmp_path / whole.name
    good = whole.read_bytes()
    path.write_bytes(good[:len(good) // 2] if damage == "truncated" else
                     marshal.dumps([1, 2]) if damage == "a list" else damage)
    again = _import(tmp_path)
    assert again["served"] == 0 and again["made"] > 2000
    assert marshal.loads(path.read_bytes()).keys() == marshal.loads(good).keys()


@pytest.mark.timeout(300)
def test_a_folder_it_cannot_write_only_costs_the_time(tmp_path):
    (tmp_path / "file").write_text("")
    seen = _import(tmp_path / "file" / "cache")
    assert seen["made"] > 2000 and seen["out"][0] == [[7.0, 10.0], [15.0, 22.0]]


def test_mxnet_imported_first_is_left_as_it_is():
    done = subprocess.run(
        [sys.executable, "-c", "import mxnet, bbb_gluon, sys; "
         "print(mxnet.base._init_op_module.__module__, len(sys.meta_path))"],
        capture_output=True, text=True, timeout=120, env={**os.environ,
                                                          "BBB_GLUON_OP_CACHE": ""})
    before = subprocess.run([sys.executable, "-c", "import sys; print(len(sys.meta_path))"],
                            capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["mxnet.base", before.stdout.strip()]


# What the file holds, on functions made here in the form MXNet generates them.
NULL = object()
HANDLE = 93824992236304  # an address, as MXNet's handles are


def _generated(source):
    scope = {"_Null": NULL, "invoke": lambda *args: args}
    exec(source, scope)  # noqa: S102 - as MXNet makes them
    return scope["f"], scope


def test_a_function_comes_back_with_this_processes_handle():
    f, scope = _generated(f"def f(data=None, axis=_Null, out=None, **kwargs):\n"
                          f"    'doc'\n    return invoke({HANDLE}, data, axis, out, 3)\n")
    f.__doc__, f.__module__ = "the doc", "mxnet.ndarray"
    entry = op_cache._entry(f, HANDLE, NULL)
    g = op_cache._build(marshal.loads(marshal.dumps(entry)), 4242, scope, NULL)
    assert g(1) == (4242, 1, NULL, None, 3) and g.__defaults__[1] is NULL
    assert (g.__doc__, g.__module__, g.__name__) == ("the doc", "mxnet.ndarray", "f")
    assert g.__globals__ is scope


@pytest.mark.parametrize("source", [
    f"def f(data=None, axis=3):\n    return invoke({HANDLE}, data)\n",  # another default
    f"def f(data=None):\n    return invoke({HANDLE}, ({HANDLE}, 1), data)\n",  # in a tuple too
    "def f(data=None):\n    return invoke(7, data)\n",
    f"def f(data=None):\n    return [invoke({HANDLE}, x) for x in data]\n",  # nested code
    f"def f(*, data=[]):\n    return invoke({HANDLE}, data)\n",
])
def test_a_function_of_another_form_is_left_to_mxnet(source):
    f, _ = _generated(source)
    assert op_cache._entry(f, HANDLE, NULL) is None


@pytest.mark.parametrize("entry", [None, (), ("code",) * 8, 3])
def test_an_entry_that_is_not_ours_is_no_function(entry):
    assert op_cache._build(entry, HANDLE, {}, NULL) is None


def test_the_file_is_named_by_what_the_code_depends_on(tmp_path, monkeypatch):
    for folder in ("ndarray", "symbol"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "register.py").write_text("")
    (tmp_path / "base.py").write_text("")
    (tmp_path / "libmxnet.so").write_bytes(b"1")
    base = types.SimpleNamespace(__file__=str(tmp_path / "base.py"),
                                 _LIB=types.SimpleNamespace(_name=str(tmp_path / "libmxnet.so")))
    monkeypatch.delenv("BBB_GLUON_OP_CACHE", raising=False)
    first = op_cache._path(base)
    assert os.path.dirname(first) == str(tmp_path / "__pycache__")
    (tmp_path / "libmxnet.so").write_bytes(b"12")  # another build of the library
    second = op_cache._path(base)
    (tmp_path / "symbol" / "register.py").write_text("# another MXNet")
    assert len({first, second, op_cache._path(base)}) == 3
    monkeypatch.setenv("BBB_GLUON_OP_CACHE", str(tmp_path / "mine"))
    assert os.path.dirname(op_cache._path(base)) == str(tmp_path / "mine")
