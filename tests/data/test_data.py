"""Tests for bbb_gluon.data: offline loading, validation, splits, transforms, batching."""

import gzip
import hashlib
import shutil
import socket
import struct

import mxnet as mx
import numpy as np
import pytest

from bbb_gluon import data as d
from bbb_gluon.data import splits

MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


# --------------------------------------------------------------------------- fixtures / helpers


@pytest.fixture(scope="module")
def mnist_raw(data_root):
    """The real MNIST arrays, read once for the whole module."""
    return {
        "train": d.load_raw("mnist", train=True, root=data_root),
        "test": d.load_raw("mnist", train=False, root=data_root),
    }


@pytest.fixture(scope="module")
def mnist_splits(data_root):
    """load_dataset with every default except the folder."""
    return d.load_dataset("mnist", root=data_root)


@pytest.fixture
def cached_raw(mnist_raw, monkeypatch):
    """Make load_raw return the cached MNIST arrays so load_dataset tests skip the gzip reads."""
    calls = []

    def fake_load_raw(name="mnist", train=True, root=None):
        assert name == "mnist"
        calls.append(train)
        images, labels = mnist_raw["train" if train else "test"]
        return images.copy(), labels.copy()

    monkeypatch.setattr(splits, "load_raw", fake_load_raw)
    return calls


@pytest.fixture
def no_network(monkeypatch):
    """Every attempt to open a network connection fails at once."""

    def refuse(*args, **kwargs):
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture
def mx_home(tmp_path, monkeypatch):
    """An empty MXNet cache, and no offline data folder configured."""
    home = tmp_path / "mxnet_home"
    monkeypatch.setenv("MXNET_HOME", str(home))
    monkeypatch.delenv("BBB_GLUON_DATA", raising=False)
    return home


def _row_hashes(images):
    flat = np.ascontiguousarray(images.reshape(len(images), -1))
    return [hashlib.sha1(row.tobytes()).hexdigest() for row in flat]


def _write_idx(path, array, magic=None):
    array = np.asarray(array, dtype=np.uint8)
    if magic is None:
        magic = 0x801 if array.ndim == 1 else 0x803
    header = struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(gzip.compress(header + array.tobytes()))
    return path


def _copy_mnist(src_root, dst_root, names):
    (dst_root / "mnist").mkdir(parents=True)
    for name in names:
        shutil.copyfile(src_root / "mnist" / name, dst_root / "mnist" / name)
    return dst_root / "mnist"


# --------------------------------------------------------------------------- raw data


def test_raw_mnist_shapes_and_dtypes(mnist_raw):
    images, labels = mnist_raw["train"]
    assert images.shape == (60000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (60000,) and labels.dtype == np.int32
    test_images, test_labels = mnist_raw["test"]
    assert test_images.shape == (10000, 28, 28) and test_images.dtype == np.uint8
    assert test_labels.shape == (10000,) and test_labels.dtype == np.int32
    assert images.max() == 255 and images.min() == 0
    assert images.flags.writeable


def test_mnist_train_class_counts(mnist_raw):
    _, labels = mnist_raw["train"]
    assert np.bincount(labels, minlength=10).tolist() == MNIST_TRAIN_COUNTS


def test_fashion_mnist_loads_from_debian_files(fashion_root):
    images, labels = d.load_raw("fashion-mnist", train=True, root=fashion_root)
    assert images.shape == (60000, 28, 28)
    assert np.bincount(labels, minlength=10).tolist() == [6000] * 10
    test_images, test_labels = d.load_raw("fashion-mnist", train=False, root=fashion_root)
    assert test_images.shape == (10000, 28, 28)
    assert np.bincount(test_labels, minlength=10).tolist() == [1000] * 10


def test_load_raw_uses_env_var(data_root, mnist_raw, monkeypatch):
    monkeypatch.setenv("BBB_GLUON_DATA", str(data_root))
    images, labels = d.load_raw("mnist", train=False)
    np.testing.assert_array_equal(images, mnist_raw["test"][0])
    np.testing.assert_array_equal(labels, mnist_raw["test"][1])


def test_find_data_root(tmp_path, monkeypatch):
    monkeypatch.delenv("BBB_GLUON_DATA", raising=False)
    assert d.find_data_root() is None
    monkeypatch.setenv("BBB_GLUON_DATA", "")
    assert d.find_data_root() is None
    monkeypatch.setenv("BBB_GLUON_DATA", str(tmp_path / "env"))
    assert d.find_data_root() == tmp_path / "env"
    assert d.find_data_root(tmp_path / "arg") == tmp_path / "arg"
    assert d.find_data_root(str(tmp_path)) == tmp_path


def test_public_constants():
    assert d.DATASETS == ("mnist", "fashion-mnist")
    assert d.FILE_NAMES == {
        "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
        "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
    }
    assert issubclass(d.DatasetNotFoundError, FileNotFoundError)
    assert issubclass(d.DataFileError, ValueError)


# --------------------------------------------------------------------------- splits


def test_load_dataset_default_shapes(mnist_splits):
    s = mnist_splits
    assert s.name == "mnist" and s.transform.kind == "126"
    for (X, y), n in zip((s.train, s.valid, s.test), (50000, 10000, 10000), strict=True):
        assert X.shape == (n, 784) and X.dtype == np.float32
        assert y.shape == (n,) and y.dtype == np.int32
    assert "train=50000" in repr(s)


def test_split_sizes(cached_raw):
    s0 = d.load_dataset(num_valid=0)
    assert len(s0.train[0]) == 60000 and s0.valid[0].shape == (0, 784)
    assert s0.valid[1].shape == (0,)
    s1 = d.load_dataset(num_valid=1234)
    assert len(s1.train[1]) == 60000 - 1234 and len(s1.valid[1]) == 1234
    assert len(s1.test[1]) == 10000
    s2 = d.load_dataset(num_valid=1234, subset=500)
    assert [len(part[1]) for part in (s2.train, s2.valid, s2.test)] == [500, 500, 500]
    s3 = d.load_dataset(num_valid=100, subset=500)
    assert [len(part[1]) for part in (s3.train, s3.valid, s3.test)] == [500, 100, 500]
    # subset keeps the first examples of the full split
    np.testing.assert_array_equal(s2.train[0], s1.train[0][:500])
    np.testing.assert_array_equal(s2.test[1], s1.test[1][:500])


def test_split_is_deterministic_per_seed(cached_raw):
    a = d.load_dataset(seed=1, num_valid=5000)
    b = d.load_dataset(seed=1, num_valid=5000)
    c = d.load_dataset(seed=2, num_valid=5000)
    for part in ("train", "valid", "test"):
        np.testing.assert_array_equal(getattr(a, part)[0], getattr(b, part)[0])
        np.testing.assert_array_equal(getattr(a, part)[1], getattr(b, part)[1])
    assert not np.array_equal(a.valid[1], c.valid[1])
    assert set(_row_hashes(a.valid[0])) != set(_row_hashes(c.valid[0]))
    np.testing.assert_array_equal(a.test[0], c.test[0])  # the test split never moves


def test_train_and_valid_partition_the_training_images(cached_raw, mnist_raw):
    images, labels = mnist_raw["train"]
    s = d.load_dataset(transform="255", seed=3)
    train_u8 = np.rint(s.train[0] * 255).astype(np.uint8)
    valid_u8 = np.rint(s.valid[0] * 255).astype(np.uint8)

    # the documented rule: first num_valid indices of default_rng(seed).permutation
    perm = np.random.default_rng(3).permutation(60000)
    np.testing.assert_array_equal(valid_u8, images[perm[:10000]].reshape(10000, 784))
    np.testing.assert_array_equal(train_u8, images[perm[10000:]].reshape(50000, 784))
    np.testing.assert_array_equal(s.valid[1], labels[perm[:10000]])
    np.testing.assert_array_equal(s.train[1], labels[perm[10000:]])

    # independently of the rule: disjoint, and together exactly the 60,000 images
    raw_hashes = _row_hashes(images)
    train_hashes, valid_hashes = _row_hashes(train_u8), _row_hashes(valid_u8)
    assert len(set(raw_hashes)) == 60000  # MNIST train has no duplicate images
    assert not set(train_hashes) & set(valid_hashes)
    assert sorted(train_hashes + valid_hashes) == sorted(raw_hashes)
    label_of = dict(zip(raw_hashes, labels.tolist(), strict=True))
    assert [label_of[h] for h in valid_hashes] == s.valid[1].tolist()


# --------------------------------------------------------------------------- transforms


def test_transform_126(mnist_splits):
    X = mnist_splits.train[0]
    assert X.min() == 0.0
    assert X.max() == np.float32(255) / np.float32(126)


def test_transform_255(cached_raw):
    s = d.load_dataset(transform="255", subset=5000)
    for X, _ in (s.train, s.valid, s.test):
        assert X.min() == 0.0 and X.max() == 1.0


def test_transform_standardize_uses_train_split_only(cached_raw, mnist_raw):
    s = d.load_dataset(transform="standardize", seed=0)
    t = s.transform
    assert t.kind == "standardize" and t.mean_.shape == (784,) and t.std_.shape == (784,)
    X = s.train[0].astype(np.float64)
    mean, std = X.mean(axis=0), X.std(axis=0)
    assert np.abs(mean).max() < 1e-4
    varying = t.std_ > t.min_std
    assert varying.sum() > 400
    np.testing.assert_allclose(std[varying], 1.0, atol=1e-3)
    assert np.all(std[~varying] < 1.0)
    # constant border pixels map to 0 and nothing explodes anywhere
    assert np.all(X[:, mnist_raw["train"][0].reshape(-1, 784).std(0) == 0] == 0)
    for part in (s.valid[0], s.test[0]):
        assert np.isfinite(part).all() and np.abs(part).max() <= 1 / t.min_std + 1e-3

    # statistics come from the 50,000 training images, not the validation ones ...
    perm = np.random.default_rng(0).permutation(60000)
    images = mnist_raw["train"][0].reshape(60000, 784) / 255.0
    np.testing.assert_allclose(t.mean_, images[perm[10000:]].mean(0), atol=1e-6)
    assert np.abs(t.mean_ - images.mean(0)).max() > 1e-4
    # ... so the validation split is standardized only approximately
    valid = s.valid[0].astype(np.float64)
    assert 1e-3 < np.abs(valid.mean(0)).max() < 0.5


def test_pixel_transform_standalone():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(50, 28, 28), dtype=np.uint8)
    images[:, 0, 0] = 7  # a constant pixel
    t = d.PixelTransform("standardize")
    with pytest.raises(RuntimeError, match="fit"):
        t(images)
    out = t.fit(images)(images)
    assert out.shape == (50, 784) and out.dtype == np.float32
    assert np.all(out[:, 0] == 0)
    new = images[:3].copy()
    new[:, 0, 0] = 255
    assert np.abs(t(new)[:, 0]).max() <= 1 / t.min_std + 1e-4
    flat = d.PixelTransform("255")(images.reshape(50, 784))
    np.testing.assert_array_equal(flat, images.reshape(50, 784) / np.float32(255))
    assert d.PixelTransform("126").fit(images) is not None


# --------------------------------------------------------------------------- missing data


def test_empty_root_raises_dataset_not_found(tmp_path):
    with pytest.raises(d.DatasetNotFoundError) as info:
        d.load_raw("mnist", root=tmp_path)
    msg = str(info.value)
    assert str(tmp_path) in msg
    # the folder was given: the fix is another one there (the variable would not be read)
    assert "the root argument; --data-dir on the command line" in msg
    assert "BBB_GLUON_DATA" not in msg
    for name in d.FILE_NAMES["train"] + d.FILE_NAMES["test"]:
        assert name in msg
    assert "has no 'mnist' subfolder" in msg
    assert "dataset-fashion-mnist" not in msg  # Debian's package holds Fashion-MNIST only
    assert isinstance(info.value, FileNotFoundError)
    assert info.value.__cause__ is None
    with pytest.raises(d.DatasetNotFoundError, match="apt-get install -y dataset-fashion-mnist"):
        d.load_raw("fashion-mnist", root=tmp_path)


@pytest.mark.parametrize("how", ["root", "environment"])
@pytest.mark.parametrize("name", ["mnist", "fashion-mnist", "mushroom"])
def test_a_data_folder_that_does_not_exist_is_reported_as_such(tmp_path, monkeypatch, how,
                                                              name):
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("BBB_GLUON_DATA", str(missing if how == "environment" else tmp_path))
    root = missing if how == "root" else None
    with pytest.raises(d.DatasetNotFoundError) as info:
        d.load_mushroom(root) if name == "mushroom" else d.load_raw(name, root=root)
    msg = str(info.value)
    assert f"the data folder {missing} " in msg and "does not exist" in msg
    assert "subfolder" not in msg.split("does not exist")[0]
    assert "root=" not in msg  # the Python argument means nothing on the command line
    assert ("dataset-fashion-mnist" in msg) == (name == "fashion-mnist")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(d.DatasetNotFoundError, match="is not a folder"):
        d.load_mushroom(tmp_path / "a-file") if name == "mushroom" else \
            d.load_raw(name, root=tmp_path / "a-file")


def test_missing_file_is_named(tmp_path, data_root):
    _copy_mnist(data_root, tmp_path, ["t10k-images-idx3-ubyte.gz"])
    with pytest.raises(d.DatasetNotFoundError, match="lacks t10k-labels-idx1-ubyte.gz"):
        d.load_raw("mnist", train=False, root=tmp_path)


def test_explicit_env_folder_does_not_download(tmp_path, monkeypatch, mx_home):
    def no_download(*args, **kwargs):
        raise AssertionError("must not download when BBB_GLUON_DATA is set")

    monkeypatch.setattr(mx.gluon.data.vision.datasets, "download", no_download)
    monkeypatch.setenv("BBB_GLUON_DATA", str(tmp_path / "empty"))
    with pytest.raises(d.DatasetNotFoundError, match="BBB_GLUON_DATA") as info:
        d.load_dataset("fashion-mnist")
    assert str(tmp_path / "empty") in str(info.value)
    assert not mx_home.exists()


def test_no_root_and_no_network(no_network, mx_home):
    with pytest.raises(d.DatasetNotFoundError) as info:
        d.load_raw("mnist", train=False)
    msg = str(info.value)
    assert "BBB_GLUON_DATA" in msg and str(mx_home / "datasets" / "mnist") in msg
    for name in d.FILE_NAMES["train"] + d.FILE_NAMES["test"]:
        assert name in msg
    assert info.value.__cause__ is None and info.value.__suppress_context__
    leftovers = [p for p in mx_home.rglob("*") if p.is_file()] if mx_home.exists() else []
    assert leftovers == []


def test_failed_download_removes_partial_files(mx_home, monkeypatch):
    cache = mx_home / "datasets" / "fashion-mnist"
    cache.mkdir(parents=True)
    (cache / "keep.txt").write_text("not ours")
    written = []

    def partial_download(url, path=None, sha1_hash=None, **kwargs):
        fname = url.split("/")[-1]
        # what MXNet leaves behind when a transfer or its SHA-1 check fails midway
        for p in (cache / f"{fname}.0123abcd", cache / fname):
            p.write_bytes(b"\x1f\x8b partial")
            written.append(p)
        raise UserWarning(f"File {fname} is downloaded but the content hash does not match.")

    monkeypatch.setattr(mx.gluon.data.vision.datasets, "download", partial_download)
    with pytest.raises(d.DatasetNotFoundError, match="UserWarning"):
        d.load_raw("fashion-mnist", train=True)
    assert written and not any(p.exists() for p in written)
    assert sorted(p.name for p in cache.iterdir()) == ["keep.txt"]


# --------------------------------------------------------------------------- bad files


def test_truncated_gzip_names_the_file(tmp_path, data_root):
    folder = _copy_mnist(data_root, tmp_path, d.FILE_NAMES["test"])
    bad = folder / "t10k-images-idx3-ubyte.gz"
    blob = bad.read_bytes()
    bad.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(d.DataFileError) as info:
        d.load_raw("mnist", train=False, root=tmp_path)
    assert str(bad) in str(info.value)


def test_short_payload_is_truncated(tmp_path):
    path = tmp_path / "short.gz"
    header = struct.pack(">IIII", 0x803, 10, 28, 28)
    path.write_bytes(gzip.compress(header + bytes(28 * 28 * 3)))
    with pytest.raises(d.DataFileError, match="truncated") as info:
        d.read_idx(path)
    assert str(path) in str(info.value)


def test_not_gzip_names_the_file(tmp_path):
    path = tmp_path / "train-labels-idx1-ubyte.gz"
    path.write_bytes(b"this is not a gzip file at all")
    with pytest.raises(d.DataFileError, match="gzip") as info:
        d.read_idx(path)
    assert str(path) in str(info.value)


def test_wrong_magic_and_trailing_data(tmp_path):
    bad_magic = _write_idx(tmp_path / "a.gz", np.zeros(5), magic=0x802)
    with pytest.raises(d.DataFileError, match="magic"):
        d.read_idx(bad_magic)
    long = tmp_path / "b.gz"
    long.write_bytes(gzip.compress(struct.pack(">II", 0x801, 3) + bytes(4)))
    with pytest.raises(d.DataFileError, match="longer"):
        d.read_idx(long)
    ok = _write_idx(tmp_path / "c.gz", np.arange(6).reshape(1, 2, 3))
    np.testing.assert_array_equal(d.read_idx(ok), np.arange(6).reshape(1, 2, 3))


def test_wrong_count_and_bad_labels(tmp_path):
    folder = tmp_path / "mnist"
    folder.mkdir()
    images_file, labels_file = (folder / n for n in d.FILE_NAMES["test"])
    _write_idx(images_file, np.zeros((10000, 28, 28)))
    _write_idx(labels_file, np.zeros(9999))
    with pytest.raises(d.DataFileError, match="9999 labels") as info:
        d.load_raw("mnist", train=False, root=tmp_path)
    assert str(labels_file) in str(info.value)

    labels = np.arange(10000) % 10
    labels[17] = 10
    _write_idx(labels_file, labels)
    with pytest.raises(d.DataFileError, match=r"outside 0\.\.9") as info:
        d.load_raw("mnist", train=False, root=tmp_path)
    assert str(labels_file) in str(info.value)

    _write_idx(images_file, np.zeros((10000, 14, 56)))
    with pytest.raises(d.DataFileError, match="28, 28"):
        d.load_raw("mnist", train=False, root=tmp_path)

    # swapped files: a labels file where the images should be
    _write_idx(images_file, np.zeros(10000))
    with pytest.raises(d.DataFileError) as info:
        d.load_raw("mnist", train=False, root=tmp_path)
    assert str(images_file) in str(info.value)


# --------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "cifar"}, "mnist, fashion-mnist"),
        ({"num_valid": -1}, "num_valid must be an integer >= 0"),
        ({"num_valid": 60000}, "num_valid must be < 60000"),
        ({"num_valid": 2.5}, "num_valid must be an integer"),
        ({"transform": "256"}, "126, 255, standardize"),
        ({"subset": 0}, "subset must be an integer >= 1"),
        ({"subset": "10"}, "subset must be an integer"),
        ({"seed": -3}, "seed must be an integer >= 0"),
    ],
)
def test_load_dataset_bad_arguments(kwargs, match, monkeypatch):
    def no_read(*args, **kwargs):
        raise AssertionError("arguments must be checked before reading data")

    monkeypatch.setattr(splits, "load_raw", no_read)
    with pytest.raises(ValueError, match=match):
        d.load_dataset(**kwargs)


def test_load_raw_unknown_name():
    with pytest.raises(ValueError, match="unknown dataset 'kmnist'.*mnist, fashion-mnist"):
        d.load_raw("kmnist")


def test_pixel_transform_bad_kind():
    with pytest.raises(ValueError, match="unknown pixel transform 'minmax'"):
        d.PixelTransform("minmax")
    with pytest.raises(ValueError, match="784 pixels"):
        d.PixelTransform("255")(np.zeros((2, 27, 28), np.uint8))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"batch_size": 2.0}, "batch_size must be an integer"),
        ({"batch_size": True}, "batch_size must be an integer"),
        ({"X": np.zeros(10, np.float32)}, "X must be a floating-point NumPy array of at"),
        ({"X": np.zeros((10, 2), np.int64)}, "X must be a floating-point NumPy array of at"),
        ({"y": np.zeros(10, bool)}, "y must be a NumPy array of integer labels"),
        ({"y": np.float32(3)}, "y must be a NumPy array of integer labels"),
        ({"y": np.zeros(9, np.int32)}, "10 inputs but 9 labels"),
        ({"last_batch": "rollover"}, "last_batch must be 'keep' or 'discard'"),
    ],
)
def test_array_loader_bad_arguments(kwargs, match):
    args = {"X": np.zeros((10, 2), np.float32), "y": np.zeros(10, np.int32), "batch_size": 4}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        d.ArrayLoader(**args)


# --------------------------------------------------------------------------- ArrayLoader


def _indexed(n=103, dim=3):
    """Inputs whose first column is the example index; labels index % 7."""
    X = np.zeros((n, dim), np.float32)
    X[:, 0] = np.arange(n)
    X[:, 1] = -np.arange(n)
    return X, (np.arange(n) % 7).astype(np.int32)


def _collect(batches):
    idx, labels, sizes = [], [], []
    for xb, yb in batches:
        assert isinstance(xb, mx.nd.NDArray) and isinstance(yb, mx.nd.NDArray)
        assert xb.dtype == np.float32 and yb.dtype == np.float32
        x = xb.asnumpy()
        np.testing.assert_array_equal(x[:, 1], -x[:, 0])
        idx.extend(x[:, 0].astype(int).tolist())
        labels.extend(yb.asnumpy().tolist())
        sizes.append(len(x))
    return np.array(idx), np.array(labels), sizes


def test_loader_batch_counts_and_last_batch():
    X, y = _indexed(103)
    keep = d.ArrayLoader(X, y, batch_size=10)
    assert len(keep) == 11 and keep.num_examples == 103 and keep.batch_size == 10
    _, _, sizes = _collect(keep.epoch(0))
    assert sizes == [10] * 10 + [3]
    drop = d.ArrayLoader(X, y, batch_size=10, last_batch="discard")
    assert len(drop) == 10
    _, _, sizes = _collect(drop.epoch(0))
    assert sizes == [10] * 10
    exact = d.ArrayLoader(X[:100], y[:100], batch_size=10, last_batch="discard")
    assert len(exact) == 10 == len(d.ArrayLoader(X[:100], y[:100], batch_size=10))
    empty = d.ArrayLoader(X[:0], y[:0], batch_size=10)
    assert len(empty) == 0 and list(empty.epoch(0)) == []


def test_loader_without_shuffle_keeps_order():
    X, y = _indexed(25)
    loader = d.ArrayLoader(X, y, batch_size=4)
    for e in (0, 5):
        idx, labels, _ = _collect(loader.epoch(e))
        np.testing.assert_array_equal(idx, np.arange(25))
        np.testing.assert_array_equal(labels, y)


def test_loader_shuffle_each_example_once_and_labels_follow():
    X, y = _indexed(103)
    loader = d.ArrayLoader(X, y, batch_size=8, shuffle=True, seed=4)
    idx, labels, _ = _collect(loader.epoch(2))
    assert sorted(idx.tolist()) == list(range(103))
    assert not np.array_equal(idx, np.arange(103))
    np.testing.assert_array_equal(labels, y[idx])
    np.testing.assert_array_equal(idx, np.random.default_rng([4, 2]).permutation(103))


def test_loader_shuffle_depends_only_on_seed_and_epoch():
    X, y = _indexed(103)
    a = d.ArrayLoader(X, y, batch_size=16, shuffle=True, seed=7)
    b = d.ArrayLoader(X, y, batch_size=16, shuffle=True, seed=7)
    other = d.ArrayLoader(X, y, batch_size=16, shuffle=True, seed=8)
    for _ in range(3):  # history must not matter
        list(b)
    a3, b3 = _collect(a.epoch(3))[0], _collect(b.epoch(3))[0]
    np.testing.assert_array_equal(a3, b3)
    assert not np.array_equal(a3, _collect(a.epoch(4))[0])
    assert not np.array_equal(a3, _collect(other.epoch(3))[0])


def test_loader_iter_advances_epochs():
    X, y = _indexed(50)
    loader = d.ArrayLoader(X, y, batch_size=7, shuffle=True, seed=1)
    first, second = _collect(iter(loader))[0], _collect(loader)[0]
    np.testing.assert_array_equal(first, _collect(loader.epoch(0))[0])
    np.testing.assert_array_equal(second, _collect(loader.epoch(1))[0])
    assert not np.array_equal(first, second)


def test_loader_honours_ctx():
    X, y = _indexed(20)
    loader = d.ArrayLoader(X, y, batch_size=6, shuffle=True, ctx=mx.cpu(1))
    assert loader.ctx == mx.cpu(1)
    for xb, yb in loader.epoch(0):
        assert xb.context == mx.cpu(1) and yb.context == mx.cpu(1)
    with mx.Context(mx.cpu(2)):
        default = d.ArrayLoader(X, y, batch_size=6)
    assert next(iter(default))[0].context == mx.cpu(2)


def test_loader_on_real_split(mnist_splits):
    X, y = mnist_splits.test
    loader = d.ArrayLoader(X, y, batch_size=128, shuffle=True, seed=0)
    assert len(loader) == 79
    xb, yb = next(iter(loader))
    perm = np.random.default_rng([0, 0]).permutation(10000)[:128]
    np.testing.assert_array_equal(xb.asnumpy(), X[perm])
    np.testing.assert_array_equal(yb.asnumpy(), y[perm].astype(np.float32))


# --------------------------------------------------------------------------- toy problems


def test_two_moons():
    X, y = d.two_moons(1000, noise=0.2, seed=0)
    assert X.shape == (1000, 2) and X.dtype == np.float32
    assert y.shape == (1000,) and y.dtype == np.int32
    assert np.bincount(y).tolist() == [500, 500]
    X2, y2 = d.two_moons(1000, noise=0.2, seed=0)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    assert not np.array_equal(X, d.two_moons(1000, noise=0.2, seed=1)[0])
    assert len(set(y[:20].tolist())) == 2  # shuffled, not sorted by class


def test_two_moons_geometry_without_noise():
    X, y = d.two_moons(101, noise=0.0, seed=0)
    assert np.bincount(y).tolist() == [50, 51]
    outer, inner = X[y == 0].astype(np.float64), X[y == 1].astype(np.float64)
    np.testing.assert_allclose(np.hypot(outer[:, 0], outer[:, 1]), 1.0, atol=1e-6)
    assert outer[:, 1].min() >= -1e-6
    np.testing.assert_allclose(np.hypot(inner[:, 0] - 1, inner[:, 1] - 0.5), 1.0, atol=1e-6)
    assert inner[:, 1].max() <= 0.5 + 1e-6


def test_regression_curve():
    x, y = d.regression_curve(200, seed=0)
    assert x.shape == (200, 1) and y.shape == (200, 1)
    assert x.dtype == np.float32 and y.dtype == np.float32
    assert x.min() >= 0.0 and x.max() <= 0.5
    x2, y2 = d.regression_curve(200, seed=0)
    np.testing.assert_array_equal(y, y2)
    xw, _ = d.regression_curve(500, low=-0.2, high=1.2, seed=5)
    assert xw.min() >= -0.2 and xw.max() <= 1.2 and xw.max() - xw.min() > 1.2
    # noise of std sqrt(0.02): residual around the noise-free curve is neither 0 nor huge
    x3, y3 = d.regression_curve(5000, seed=1)
    clean = x3 + 0.3 * np.sin(2 * np.pi * x3) + 0.3 * np.sin(4 * np.pi * x3)
    assert 0.1 < float(np.std(y3 - clean)) < 0.4


def test_regression_curve_noise_std_controls_the_noise():
    x, y = d.regression_curve(n=500, seed=3, noise_std=0.0)
    x64 = x[:, 0].astype(np.float64)
    clean = x64 + 0.3 * np.sin(2 * np.pi * x64) + 0.3 * np.sin(4 * np.pi * x64)
    np.testing.assert_allclose(y[:, 0], clean, atol=1e-5)
    _, y_small = d.regression_curve(n=500, seed=3, noise_std=0.02)
    _, y_default = d.regression_curve(n=500, seed=3)
    small, default = y_small[:, 0] - clean, y_default[:, 0] - clean
    # the same draws scaled: the residual shrinks with the noise (slope of the curve <= 6.7)
    assert 0 < np.abs(small).std() < 0.1 < np.abs(default).std()
    with pytest.raises(ValueError, match="noise_std"):
        d.regression_curve(noise_std=-1.0)


# ---------------------------------------------------------------- UCI Mushroom
def test_mushroom_is_read_and_encoded(mushroom_root):
    m = d.load_mushroom(mushroom_root)
    assert m.features.shape == (8124, 22) and m.features.dtype == np.int32
    assert int(m.edible.sum()) == 4208
    assert m.width == 117  # the values present; the .names file lists 126
    one_hot = m.one_hot()
    assert one_hot.shape == (8124, 117) and (one_hot.sum(1) == 22).all()
    # each attribute's ones fall in its own block of columns
    for j in range(22):
        names = {m.columns[c].split("=")[0] for c in np.unique(m.features[:, j])}
        assert len(names) == 1
    assert (one_hot.sum(0) > 0).all()  # no column of zeros
    assert "veil-type=p" in m.columns and "veil-type=u" not in m.columns
    # odour alone nearly separates the classes: foul-smelling mushrooms are poisonous
    foul = one_hot[:, m.columns.index("odor=f")] == 1
    assert foul.sum() == 2160 and not m.edible[foul].any()


def _mushroom_copy(tmp_path, mushroom_root, edit):
    lines = (mushroom_root / "mushroom" / "agaricus-lepiota.data").read_text().splitlines()
    folder = tmp_path / "mushroom"
    folder.mkdir()
    (folder / "agaricus-lepiota.data").write_text("\n".join(edit(lines)) + "\n")
    return tmp_path


@pytest.mark.parametrize("edit, match", [
    (lambda lines: lines[:-1], "8123 rows"),
    (lambda lines: [lines[0].replace(",", ",x,", 1)] + lines[1:], "23 one-letter fields"),
    # the right length, a letter where a comma goes (and, in the second, a short line later)
    (lambda lines: lines[:5] + [lines[5][0] + "x" + lines[5][2:]] + lines[6:],
     "line 6: expected 23 one-letter fields"),
    (lambda lines: lines[:5] + [lines[5][0] + "x" + lines[5][2:]] + lines[6:9]
     + [lines[9][:-2]] + lines[10:], "line 6: expected 23 one-letter fields"),
    (lambda lines: ["q" + lines[0][1:]] + lines[1:], "class"),
    (lambda lines: [lines[0][:2] + "z" + lines[0][3:]] + lines[1:], "cap-shape"),
    (lambda lines: [("p" if ln[0] == "e" else "e") + ln[1:] for ln in lines], "edible rows"),
])
def test_a_wrong_mushroom_file_is_a_clear_error(tmp_path, mushroom_root, edit, match):
    root = _mushroom_copy(tmp_path, mushroom_root, edit)
    with pytest.raises(d.DataFileError, match=match):
        d.load_mushroom(root)


def test_a_missing_mushroom_file_says_how_to_fix_it(tmp_path, monkeypatch):
    with pytest.raises(d.DatasetNotFoundError, match="agaricus-lepiota.data") as e:
        d.load_mushroom(tmp_path)
    # the folder was given: the fix is another one there, not the variable
    assert "mushroom" in str(e.value) and "BBB_GLUON_DATA" not in str(e.value)
    assert "give that folder (the root argument; --data-dir on the command line)" in \
        str(e.value)
    monkeypatch.delenv("BBB_GLUON_DATA", raising=False)
    with pytest.raises(d.DatasetNotFoundError, match="unset"):
        d.load_mushroom()


# --------------------------------------------------------------------------- require_datasets


def _fake_dataset(root, name):
    folder = root / name
    folder.mkdir(parents=True)
    files = [d.MUSHROOM_FILE] if name == "mushroom" else [*d.FILE_NAMES["train"],
                                                          *d.FILE_NAMES["test"]]
    for f in files:
        (folder / f).write_bytes(b"")
    return folder


def test_require_datasets_present_is_silent(tmp_path, monkeypatch):
    for name in ("mnist", "fashion-mnist", "mushroom"):
        _fake_dataset(tmp_path, name)
    assert d.require_datasets("mnist", "fashion-mnist", "mushroom", root=tmp_path) == tmp_path
    monkeypatch.setenv("BBB_GLUON_DATA", str(tmp_path))
    assert d.require_datasets("mnist") == tmp_path


def test_require_datasets_missing_says_where_to_put_it(tmp_path):
    _fake_dataset(tmp_path, "mnist")
    (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(d.DatasetNotFoundError) as e:
        d.require_datasets("mnist", "fashion-mnist", "mushroom", root=tmp_path)
    message = str(e.value)
    for part in ("'mnist'", "t10k-labels-idx1-ubyte.gz", "'fashion-mnist'",
                 str(tmp_path / "fashion-mnist"), "'mushroom'", "agaricus-lepiota.data",
                 "BBB_GLUON_DATA", "make data", "make lab", "docs/data.md"):
        assert part in message, part
    assert "train-images" not in message.split("'fashion-mnist'")[0]  # only what is missing


def test_require_datasets_without_a_folder(mx_home):
    with pytest.raises(d.DatasetNotFoundError, match="BBB_GLUON_DATA is unset") as e:
        d.require_datasets("mnist", "mushroom")
    assert str(mx_home / "datasets" / "mnist") in str(e.value)
    _fake_dataset(mx_home / "datasets", "mnist")  # MXNet's cache serves the images
    assert d.require_datasets("mnist") is None
    with pytest.raises(d.DatasetNotFoundError, match="never downloaded"):
        d.require_datasets("mushroom")


def test_require_datasets_unknown_name(tmp_path):
    with pytest.raises(ValueError, match="unknown dataset"):
        d.require_datasets("cifar10", root=tmp_path)


def test_require_datasets_bad_input(tmp_path):
    with pytest.raises(TypeError, match="at least one"):
        d.require_datasets(root=tmp_path)
    with pytest.raises(d.DatasetNotFoundError, match="does not exist or is not a folder"):
        d.require_datasets("mnist", root=tmp_path / "nowhere")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(d.DatasetNotFoundError, match="is not a folder"):
        d.require_datasets("mnist", root=tmp_path / "a-file")
    with pytest.raises(d.DatasetNotFoundError) as e:
        d.require_datasets("mnist", "mnist", "fashion-mnist", root=tmp_path)
    message = str(e.value)
    assert message.count("'mnist':") == 1  # a name given twice is reported once
    assert "dataset-fashion-mnist" in message and "archive.ics.uci.edu" not in message
