"""Tests for bbb_gluon.training.checkpoint beyond those of fit's resume (test_fit.py)."""

import pickle
import shutil

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

import bbb_gluon as bbb
from bbb_gluon import CheckpointError, Posterior, training
from bbb_gluon.training.checkpoint import set_trained_arrays, trained_arrays


def test_a_checkpoint_of_a_tied_network_holds_the_shared_weight_once():
    """The posterior stands for a Parameter under every name layers share it by: neither
    name is written again as a deterministic array, and the arrays load back."""
    first = nn.Dense(3, in_units=3)
    net = nn.HybridSequential()
    net.add(first, nn.Dense(3, in_units=3, params=first.params), nn.BatchNorm(in_channels=3))
    net.initialize(ctx=mx.cpu(1))
    posterior = Posterior(net, seed=0)
    arrays = trained_arrays(net, posterior)
    plain = sorted(k for k in arrays if ":" not in k)  # not the posterior's or the loss's
    assert plain == ["2.beta", "2.gamma", "2.running_mean", "2.running_var"]
    other = nn.HybridSequential()
    first2 = nn.Dense(3, in_units=3)
    other.add(first2, nn.Dense(3, in_units=3, params=first2.params),
              nn.BatchNorm(in_channels=3))
    other.initialize(ctx=mx.cpu(1))
    posterior2 = Posterior(other, seed=1)
    set_trained_arrays(arrays, other, posterior2, "test")
    for a, b in zip(posterior.mu(), posterior2.mu(), strict=True):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


# --------------------------------------------------------------------------- load_run


@pytest.fixture(scope="module")
def adam_run(tmp_path_factory):
    """A one-epoch run with Adam (two state arrays per mu and rho) on synthetic data."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(64, 784)).astype(np.float32)
    run = tmp_path_factory.mktemp("runs") / "adam"
    bbb.fit(bbb.TrainConfig(epochs=1, batch_size=32, eval_samples=0, optimizer="adam"),
            (X, np.arange(64) % 10), net=bbb.MLP(hidden=(8,)), run_dir=run, progress=False)
    return run


def _holds_bytes(value):
    if isinstance(value, bytes | bytearray):
        return True
    if isinstance(value, dict):
        return any(_holds_bytes(v) for v in value.values())
    return isinstance(value, list | tuple) and any(_holds_bytes(v) for v in value)


def test_load_runs_meta_is_small_and_names_the_optimiser_states_size(adam_run):
    stored = mx.nd.load(str(adam_run / "checkpoints" / "latest.params"))["__trainer__"]
    assert stored.size > 50_000  # Adam's states of 2 x 6,442 arrays: tens of kB
    _, _, _, meta = bbb.load_run(adam_run, "latest")
    assert meta["optimizer_state_bytes"] == stored.size
    assert not _holds_bytes(meta) and len(pickle.dumps(meta)) < 5_000
    assert {"epoch", "batch", "history", "best", "config", "noise"} <= set(meta)
    assert meta["epoch"] == 1 and len(meta["history"]) == 1


def test_a_truncated_checkpoint_raises_a_public_error(adam_run, tmp_path):
    run = shutil.copytree(adam_run, tmp_path / "run")
    latest = run / "checkpoints" / "latest.params"
    latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 2])
    with pytest.raises(CheckpointError) as info:  # what callers caught before still works
        bbb.load_run(run, "latest")
    error = info.value
    assert type(error) is bbb.UnreadableCheckpointError
    assert bbb.UnreadableCheckpointError is training.UnreadableCheckpointError
    assert "UnreadableCheckpointError" in bbb.__all__ and not type(error).__name__.startswith("_")
    assert str(latest) in str(error) and "corrupt" in str(error)
    posterior_file = run / "checkpoints" / "best.params"
    mx.nd.save(str(posterior_file), {"0.weight": mx.nd.zeros((2, 2))})  # no checkpoint
    with pytest.raises(bbb.UnreadableCheckpointError, match="not a bbb_gluon checkpoint"):
        bbb.load_run(run, "best")
