"""Datasets for the Bayes by Backprop experiments: MNIST, Fashion-MNIST, UCI Mushroom and two
toy problems, read offline with clear errors.

* ``load_raw(name, train, root)`` returns the untouched ``uint8`` images and their labels
  (``idx``);
* ``load_dataset(name, ...)`` returns a deterministic train / validation / test ``Splits``
  with the pixels transformed by a ``PixelTransform`` fitted on the training split only
  (``splits``);
* ``ArrayLoader`` yields mini-batches as MXNet NDArrays straight from in-memory arrays
  (``loader``);
* ``load_mushroom`` reads the UCI Mushroom data set for the contextual bandit of
  ``bbb_gluon.bandit`` (``mushroom``);
* ``load_uci(name, split)`` reads one standard train/test split of a UCI regression
  dataset, standardised with its training rows' statistics (``uci``); ``load_table(path,
  target)`` a CSV file of your own, split and standardised the same way (``table``);
* ``two_moons`` and ``regression_curve`` generate the small synthetic problems of the
  tutorials (``toy``);
* ``require_datasets(name, ...)`` stops a notebook or script at once, with one message
  saying where to put the files, when a dataset it needs is missing (``require``).

The data folder is the ``root`` argument, else the environment variable ``BBB_GLUON_DATA``
(``folder``). It must hold one subfolder per dataset (``mnist/``, ``fashion-mnist/``,
``mushroom/``, ``uci/``). Only when neither is set does the image loader fall back to MXNet's own
download into ``$MXNET_HOME/datasets/<name>``.
"""

from .folder import ENV_VAR, DataFileError, DatasetNotFoundError, find_data_root
from .idx import DATASETS, FILE_NAMES, load_raw, read_idx
from .loader import ArrayLoader
from .mushroom import MUSHROOM_FILE, Mushrooms, load_mushroom
from .require import require_datasets
from .splits import PixelTransform, Splits, load_dataset
from .table import load_table
from .toy import regression_curve, two_moons
from .uci import UCI_DATASETS, UCISplit, load_uci

__all__ = [
    "DATASETS",
    "ENV_VAR",
    "FILE_NAMES",
    "MUSHROOM_FILE",
    "ArrayLoader",
    "DataFileError",
    "DatasetNotFoundError",
    "PixelTransform",
    "Splits",
    "find_data_root",
    "Mushrooms",
    "load_dataset",
    "load_mushroom",
    "load_raw",
    "read_idx",
    "regression_curve",
    "require_datasets",
    "two_moons",
    "UCI_DATASETS",
    "UCISplit",
    "load_uci",
    "load_table",
]
