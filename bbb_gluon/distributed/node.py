"""A scheduler or server of a ``dist_sync`` run, without MXNet's Python package.

``python -c "import mxnet"`` with ``DMLC_ROLE`` set to ``scheduler`` or ``server`` is how
MXNet starts these processes: the import runs the node and exits. Most of that import
(about 2 CPU-seconds, docs/distributed.md) generates MXNet's operator functions, which
neither role calls: the scheduler only introduces the processes to each other, and a
server sums the workers' gradients in C++. This script loads ``libmxnet.so`` itself and
makes the three calls MXNet's import would (``mxnet/kvstore/kvstore_server.py``).

What it cannot do is run an optimizer a worker sends (a Gluon ``Trainer`` with
``update_on_kvstore=True``, Gluon's default for ``dist_sync``): that needs MXNet's Python
package, so ``launch`` starts such servers with ``import mxnet`` unless told that the workers
update their own parameters, as ``fit`` and ``bbb-gluon train`` do. A server started here
that receives an optimizer says so and exits with status 1.

Run as a file (``python .../node.py``), not as ``-m bbb_gluon.distributed.node``: importing
the package would import MXNet. Only the standard library is used here.
"""

import ctypes
import importlib.util
import os
import sys

# The command id a worker's KVStore.set_optimizer sends (MXNet's kvstore.py).
_SET_OPTIMIZER = 0


def library_path():
    """``libmxnet.so`` as MXNet's own import finds it (``mxnet/libinfo.py``, read as a file
    so that the ``mxnet`` package is not imported)."""
    spec = importlib.util.find_spec("mxnet")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("MXNet is not installed in this Python")
    path = os.path.join(list(spec.submodule_search_locations)[0], "libinfo.py")
    info_spec = importlib.util.spec_from_file_location("_bbb_mxnet_libinfo", path)
    info = importlib.util.module_from_spec(info_spec)
    info_spec.loader.exec_module(info)
    return info.find_lib_path()[0]


def _controller(role):
    def control(command, body, _):
        if command == _SET_OPTIMIZER:
            print(f"this {role} was started without MXNet's Python package, which a worker's "
                  "optimizer needs (a Trainer with update_on_kvstore=True): start the "
                  "servers with it (launch(..., server_optimizer=True), the default of a "
                  "program of your own)", file=sys.stderr, flush=True)
        else:
            print(f"{role}: unknown command {command}", file=sys.stderr, flush=True)
        os._exit(1)  # an exception raised here would be printed and ignored by ctypes
    return control


def run():
    """Run this process's scheduler or server until the run ends."""
    role = os.environ.get("DMLC_ROLE", "")
    if role not in ("scheduler", "server"):
        sys.exit(f"node.py runs a scheduler or a server: DMLC_ROLE is {role!r}")
    lib = ctypes.CDLL(library_path(), ctypes.RTLD_LOCAL)
    lib.MXGetLastError.restype = ctypes.c_char_p

    def check(status):
        if status != 0:
            sys.exit(f"{role}: {lib.MXGetLastError().decode('utf-8', 'replace')}")

    handle = ctypes.c_void_p()
    check(lib.MXKVStoreCreate(ctypes.c_char_p(b"dist"), ctypes.byref(handle)))
    prototype = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
    controller = prototype(_controller(role))  # held here while the server runs
    check(lib.MXKVStoreRunServer(handle, controller, None))
    check(lib.MXNotifyShutdown())


if __name__ == "__main__":
    run()
