"""Tests for ``bbb_gluon.data.table``: a CSV regression table of one's own."""

import numpy as np
import pytest

from bbb_gluon.data import DataFileError, load_table


def _write(tmp_path, text, name="t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_table_is_split_and_standardised_by_its_training_rows(tmp_path):
    rng = np.random.default_rng(0)
    values = rng.normal(size=(40, 3)) * [1.0, 10.0, 3.0] + [0.0, 5.0, -2.0]
    path = _write(tmp_path, "x1,y,x2\n" + "\n".join(",".join(map(repr, r)) for r in values))
    split = load_table(path, "y", test_fraction=0.25, seed=1)
    assert split.X_train.shape == (30, 2) and split.X_test.shape == (10, 2)
    assert split.y_train.shape == (30, 1) and split.name == "t"
    np.testing.assert_allclose(split.X_train.mean(axis=0), 0, atol=1e-6)
    np.testing.assert_allclose(split.y_train.std(), 1, rtol=1e-5)
    # the target column, back on its own scale, is the file's, rows in the file's order
    rows = np.sort(np.random.default_rng(1).permutation(40)[10:])
    np.testing.assert_allclose(split.to_original(split.y_train[:, 0]), values[rows, 1],
                               rtol=1e-5)
    again = load_table(path, "y", test_fraction=0.25, seed=1)
    np.testing.assert_array_equal(again.X_test, split.X_test)  # the same rows for a seed


@pytest.mark.parametrize("text, target, match", [
    ("a,b\n" + "1,2\n" * 12, "c", r"no column named 'c' \(its columns: a, b\)"),
    ("a,b\n" + "1,2\n" * 5, "b", "5 rows; a regression needs at least 10"),
    ("a,b\n" + "1,2\n" * 11 + "1\n", "b", "row 13 has 1 cells, the header 2"),
    ("a,b\n" + "1,2\n" * 11 + "1,nan\n", "b", "row 13, column 'b' is not finite"),
    ("b\n" + "1\n" * 12, "b", "no input column besides 'b'"),
    ("a,b\n" + "1,2\n" * 12, "b", "the training targets are all 2"),
])
def test_what_a_table_cannot_be(tmp_path, text, target, match):
    with pytest.raises(DataFileError, match=match):
        load_table(_write(tmp_path, text), target)
    with pytest.raises(ValueError, match="test_fraction"):
        load_table(_write(tmp_path, text), target, test_fraction=1.0)
