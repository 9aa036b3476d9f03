"""Files the package writes: atomically, with ordinary permissions, and JSON inside them.

Every file is written to a temporary file in the destination folder and renamed over the
target, so a crash, a kill or Ctrl-C mid-write leaves the previous file as it was. Run
metadata (a checkpoint's history, a posterior's layout) travels inside MXNet parameter
files as a uint8 array holding JSON text.
"""

import json
import os
import tempfile

import mxnet as mx
import numpy as np

__all__ = ["FileWriteError", "atomic_write", "atomic_write_text", "atomic_nd_save",
           "read_nd_file", "json_array",
           "array_json", "bytes_array", "array_bytes"]


class FileWriteError(OSError):
    """A file could not be written (a full disk, an I/O error, a read-only folder); the
    file that was there before is as it was. ``filename`` names it."""

    def __str__(self):
        return self.strerror


def _readable_like_open(path):
    """Give a temporary file the permissions ``open()`` would (mkstemp makes them 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def atomic_write(path, write, suffix=""):
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    tmp, existed = None, os.path.exists(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=folder)
        os.close(fd)
        _readable_like_open(tmp)
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            try:
                os.remove(tmp)
            except OSError:
                pass  # the folder went read-only or away: the target is untouched anyway
        # MXNet reports a failed write (a full disk) as MXNetError, not OSError.
        if isinstance(e, OSError | mx.base.MXNetError) and not isinstance(e, FileWriteError):
            reason = e.strerror if isinstance(e, OSError) and e.strerror else \
                (str(e).strip().splitlines() or [type(e).__name__])[0]
            kept = ("the file that was there before is unchanged" if existed else
                    "nothing was left there")
            raise FileWriteError(getattr(e, "errno", None),
                                 f"could not write {path}: {reason}; {kept}", path) from e
        raise


def atomic_write_text(path, text):
    """Write ``text`` to ``path`` atomically."""
    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)

    atomic_write(path, write)


def atomic_nd_save(path, arrays):
    """``mx.nd.save(path, arrays)``, atomically."""
    # An error of an earlier operator surfaces at the next sync: here, not inside the
    # write, where it would read as a failing disk.
    mx.nd.waitall()
    atomic_write(path, lambda tmp: mx.nd.save(tmp, arrays), suffix=".params")


def read_nd_file(path):
    """``nd.load`` of a dict of named arrays, with a clear error for a missing or corrupt
    file (``FileNotFoundError`` / ``ValueError``)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {path}")
    try:
        arrays = mx.nd.load(path)
    except mx.base.MXNetError:
        raise ValueError(f"{path} is corrupt or not an MXNet parameter file") from None
    if not isinstance(arrays, dict):
        raise ValueError(f"{path} holds no named arrays")
    return arrays


def bytes_array(data):
    """Raw bytes as a uint8 NDArray (to store them in a parameter file)."""
    return mx.nd.array(np.frombuffer(data, dtype=np.uint8), dtype="uint8")


def array_bytes(array):
    """The bytes :func:`bytes_array` stored."""
    return array.asnumpy().astype(np.uint8).tobytes()


def json_array(obj):
    """``obj`` as JSON text in a uint8 NDArray."""
    return bytes_array(json.dumps(obj).encode())


def array_json(array):
    """The object :func:`json_array` stored; ``ValueError`` if it is not JSON text."""
    try:
        return json.loads(array_bytes(array).decode())
    except UnicodeDecodeError:
        raise ValueError("not JSON text") from None
