"""Tests for bbb_gluon.data.uci: the UCI regression benchmark's splits, read offline."""

import shutil

import numpy as np
import pytest

from bbb_gluon.data import UCI_DATASETS, DataFileError, DatasetNotFoundError, load_uci


def raw(root, folder):
    data = np.loadtxt(root / "uci" / folder / "data.txt", ndmin=2)
    features = np.loadtxt(root / "uci" / folder / "index_features.txt", dtype=int, ndmin=1)
    target = np.loadtxt(root / "uci" / folder / "index_target.txt", dtype=int, ndmin=1)
    return data, features, int(target[0])


@pytest.mark.parametrize("name", ["boston", "bostonHousing", "BOSTON"])
def test_a_split_is_the_files_rows_standardised_by_the_training_rows(uci_root, name):
    s = load_uci(name, 3, root=uci_root)
    assert s.name == "boston" and s.split == 3 and (s.hidden, s.epochs) == (50, 40)
    data, features, target = raw(uci_root, "bostonHousing")
    train = np.loadtxt(uci_root / "uci" / "bostonHousing" / "index_train_3.txt", dtype=int)
    test = np.loadtxt(uci_root / "uci" / "bostonHousing" / "index_test_3.txt", dtype=int)
    assert s.X_train.shape == (len(train), len(features)) and s.y_test.shape == (len(test), 1)
    assert s.X_train.dtype == np.float32 and s.y_train.dtype == np.float32
    # the training rows: mean 0, deviation 1; the test rows by the same statistics
    np.testing.assert_allclose(s.X_train.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(s.X_train.std(axis=0), 1, atol=1e-5)
    np.testing.assert_allclose(s.to_original(s.y_test)[:, 0], data[test, target], rtol=1e-5)
    np.testing.assert_allclose(s.X_test * s.x_std + s.x_mean, data[test][:, features],
                               rtol=1e-4, atol=1e-4)
    assert s.y_mean == pytest.approx(data[train, target].mean())
    # a density of standardised targets, on the original scale: divided by y_std
    assert s.log_likelihood_to_original(0.0) == pytest.approx(-np.log(s.y_std))


def test_every_dataset_reads_with_its_own_split_count(uci_root):
    for name, (_, rows, splits, _) in UCI_DATASETS.items():
        if name == "protein":  # 45,730 rows: read once below, it takes a while
            continue
        s = load_uci(name, splits - 1, root=uci_root)
        assert len(s.X_train) + len(s.X_test) == rows, name
        assert np.isfinite(s.X_train).all() and np.isfinite(s.X_test).all(), name
    naval = load_uci("naval", root=uci_root)  # two constant columns: divided by 1
    constant = naval.x_std == 1.0
    assert constant.sum() == 2 and np.isfinite(naval.X_test).all()
    assert np.abs(naval.X_train[:, constant]).max() < 1e-6  # not rounding blown up


@pytest.mark.parametrize("name, split, match", [
    ("housing", 0, r"unknown UCI dataset 'housing'; choose one of \['boston'"),
    ("boston", 20, r"split must be an int in 0..19 for boston, got 20"),
    ("protein", 5, r"split must be an int in 0..4 for protein"),
    ("yacht", -1, r"in 0..19"),
    ("yacht", 1.0, r"in 0..19"),
])
def test_a_bad_name_or_split_is_refused_before_any_file_is_read(tmp_path, name, split, match):
    with pytest.raises(ValueError, match=match):
        load_uci(name, split, root=tmp_path)  # tmp_path has no data: not read


def test_missing_data_say_where_to_put_them(tmp_path, monkeypatch):
    monkeypatch.delenv("BBB_GLUON_DATA", raising=False)
    with pytest.raises(DatasetNotFoundError, match="BBB_GLUON_DATA is unset.*make data"):
        load_uci("boston")
    with pytest.raises(DatasetNotFoundError, match=r"uci/bostonHousing.*data.txt does not"):
        load_uci("boston", root=tmp_path)


def test_a_changed_or_incomplete_folder_is_refused(uci_root, tmp_path):
    copy = tmp_path / "uci" / "yacht"
    shutil.copytree(uci_root / "uci" / "yacht", copy)
    (copy / "index_test_2.txt").unlink()
    with pytest.raises(DatasetNotFoundError, match="lacks index_test_2.txt"):
        load_uci("yacht", 2, root=tmp_path)
    assert load_uci("yacht", 1, root=tmp_path).X_train.shape[1] == 6
    with open(copy / "data.txt", "a") as f:
        f.write("0 0 0 0 0 0 0\n")
    with pytest.raises(DataFileError, match="not the benchmark's file"):
        load_uci("yacht", 1, root=tmp_path)


def test_require_datasets_checks_the_uci_folders(uci_root, tmp_path):
    from bbb_gluon.data import require_datasets

    assert require_datasets("uci", root=uci_root) == uci_root
    shutil.copytree(uci_root / "uci", tmp_path / "uci")
    (tmp_path / "uci" / "yacht" / "data.txt").unlink()
    with pytest.raises(DatasetNotFoundError, match=r"'uci': .* lacks yacht/data.txt\. .*"
                                                   r"make data` links \.\./shared/data/uci"):
        require_datasets("uci", root=tmp_path)


def test_validation_rows_come_from_the_training_rows_only(uci_root):
    full = load_uci("boston", 4, root=uci_root)
    v = load_uci("boston", 4, root=uci_root, validation=0.2)
    assert v.validation == 0.2 and "validation" in repr(v) and "test" in repr(full)
    n = len(full.X_train)
    assert len(v.X_test) == round(0.2 * n) and len(v.X_train) + len(v.X_test) == n
    # every row of the tuning split is a training row of the split, none a test row
    def original(s, X, y):
        return np.hstack([X * s.x_std + s.x_mean, s.to_original(y)])

    def nearest(rows, others):
        return np.abs(rows[:, None, :] - others[None]).max(axis=2).min(axis=1)
    train_rows = original(full, full.X_train, full.y_train)
    test_rows = original(full, full.X_test, full.y_test)
    for X, y in ((v.X_train, v.y_train), (v.X_test, v.y_test)):
        rows = original(v, X, y)
        assert nearest(rows, train_rows).max() < 1e-3
        assert nearest(rows, test_rows).min() > 1e-3
    # standardised by the 80% alone; the same rows every time for a split, others for
    # another split
    np.testing.assert_allclose(v.X_train.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(v.y_train.mean(), 0, atol=1e-5)
    again = load_uci("boston", 4, root=uci_root, validation=0.2)
    np.testing.assert_array_equal(again.X_test, v.X_test)
    other = load_uci("boston", 5, root=uci_root, validation=0.2)
    assert not np.array_equal(other.y_test, v.y_test)


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.2, True, "0.2"])
def test_a_bad_validation_fraction_is_refused(tmp_path, bad):
    with pytest.raises(ValueError, match=r"validation must be a fraction in \(0, 1\)"):
        load_uci("boston", 0, root=tmp_path, validation=bad)
