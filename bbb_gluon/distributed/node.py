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

``launch`` runs it as ``python -m bbb_gluon.distributed.node``: importing ``bbb_gluon`` and
its ``distributed`` loads none of their modules (their names load on first use), and this
one uses only the standard library.
"""

import ctypes
import importlib.util
import os
import sys


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
    # MXNet hands Python only the commands its C++ server does not handle itself, and the
    # only one its Python package sends is the optimizer (_SET_OPTIMIZER).
    def control(command, body, _):
        print(f"this {role} was started without MXNet's Python package, which a worker's "
              f"optimizer needs (command {command}: a Trainer with update_on_kvstore=True): "
              "start the servers with it (launch(..., server_optimizer=True), the default "
              "for a program of your own)", file=sys.stderr, flush=True)
        os._exit(1)  # an exception raised here would be printed and ignored by ctypes
    return control


def run():
    """Run this process's scheduler or server until the run ends."""
    role = os.environ.get("DMLC_ROLE", "")
    if role not in ("scheduler", "server"):
        sys.exit(f"node.py runs a scheduler or a server: DMLC_ROLE is {role!r}")
    lib = ctypes.CDLL(library_path(), ctypes.RTLD_LOCAL)
    prototype = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
    lib.MXGetLastError.restype = ctypes.c_char_p
    lib.MXKVStoreCreate.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.MXKVStoreRunServer.argtypes = [ctypes.c_void_p, prototype, ctypes.c_void_p]

    def check(status):
        if status != 0:
            sys.exit(f"{role}: {lib.MXGetLastError().decode('utf-8', 'replace')}")

    handle = ctypes.c_void_p()
    try:
        check(lib.MXKVStoreCreate(b"dist", ctypes.byref(handle)))
        controller = prototype(_controller(role))  # held here while the server runs
        check(lib.MXKVStoreRunServer(handle, controller, None))
    finally:
        lib.MXNotifyShutdown()  # as MXNet's import does at exit


if __name__ == "__main__":
    run()
