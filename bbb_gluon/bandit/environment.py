"""The Mushroom bandit and each agent's replay buffer.

Every random draw comes from a counter-based hash stream (``hash_key``, ``hash_stream``) that
``_kernels/bandit.cc`` computes the same way, so the Python and compiled engines see the
same mushrooms, rewards and minibatches.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_int
from ..data import Mushrooms

__all__ = ["MushroomBandit", "ReplayBuffer", "EAT", "PASS"]


EAT, PASS = 1, 0
_MASK = (1 << 64) - 1


# ---------------------------------------------------------------- hashing (shared with C++)
def mix64(z):
    """splitmix64's finaliser on uint64 arrays (the kernel's ``mix64``)."""
    z = np.asarray(z, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def hash_key(*parts):
    """A 64-bit key from small non-negative integers (seed, stream, ...)."""
    k = np.uint64(0)
    with np.errstate(over="ignore"):
        for p in parts:
            k = mix64(k ^ np.uint64(p & _MASK))
    return int(k)


def hash_stream(key, t0, t1):
    """Hashes of steps ``t0 .. t1 - 1`` under ``key``: a pure function of (key, t)."""
    with np.errstate(over="ignore"):
        return mix64(np.uint64(key) + np.arange(t0, t1, dtype=np.uint64))


def hash_below(h, n):
    """Map 64-bit hashes to integers in [0, n) (multiply-shift on the top 32 bits)."""
    return ((h >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32)


def hash_unit(h):
    """Map 64-bit hashes to float32 uniforms in [0, 1) (24 bits)."""
    return ((h >> np.uint64(8)) & np.uint64(0xFFFFFF)).astype(np.float32) / np.float32(2**24)


# ---------------------------------------------------------------- the environment
class MushroomBandit:
    """The Mushroom contextual bandit.

    The mushroom shown at step ``t`` and whether a poisonous meal then costs −35 are pure
    functions of ``(seed, t)``, so every agent of a seed meets the same mushrooms and the
    same luck (common random numbers), and a resumed run draws what it would have drawn.

    Parameters
    ----------
    mushrooms : bbb_gluon.data.Mushrooms
        From :func:`bbb_gluon.data.load_mushroom`.
    """

    def __init__(self, mushrooms: Mushrooms):
        if not isinstance(mushrooms, Mushrooms):
            raise TypeError("mushrooms must come from bbb_gluon.data.load_mushroom()")
        self.mushrooms = mushrooms
        self.features = np.ascontiguousarray(mushrooms.features, dtype=np.int32)
        self.edible = np.ascontiguousarray(mushrooms.edible, dtype=np.uint8)

    @property
    def num_rows(self):
        return len(self.edible)

    @property
    def context_width(self):
        return self.mushrooms.width

    def draw(self, seed, t0, t1):
        """``(rows, unlucky)`` for steps ``t0 .. t1 - 1``: the mushrooms shown, and 1
        where eating a poisonous one would pay −35 (else +5); ``int32`` and ``uint8``."""
        h = hash_stream(hash_key(seed, 1), t0, t1)
        rows = hash_below(h, self.num_rows).astype(np.int32)
        unlucky = ((h >> np.uint64(7)) & np.uint64(1)).astype(np.uint8)
        return rows, unlucky

    def reward(self, rows, actions, unlucky):
        """Rewards of eating (1) or not (0) the mushrooms ``rows``."""
        rows, actions = np.asarray(rows), np.asarray(actions)
        bad = (self.edible[rows] == 0) & (np.asarray(unlucky) != 0)
        return np.where(actions == EAT, np.where(bad, -35.0, 5.0), 0.0).astype(np.float32)

    def oracle_reward(self, rows):
        """What the oracle gets: 5 for an edible mushroom (it eats), 0 for a poisonous one."""
        return np.where(self.edible[np.asarray(rows)] != 0, 5.0, 0.0).astype(np.float32)

    def regret(self, rows, actions, unlucky):
        """Per-step regret: the oracle's reward minus the reward received."""
        return self.oracle_reward(rows) - self.reward(rows, actions, unlucky)

    def inputs(self, rows, actions):
        """The network's input columns ``(n, 23)``: the context's 22 ones and the action's
        (``width`` + action)."""
        rows = np.asarray(rows)
        act = self.context_width + np.asarray(actions, dtype=np.int32)
        return np.concatenate([self.features[rows], act[:, None]], axis=1).astype(np.int32)

    def one_hot(self, rows, actions):
        """The network's dense inputs ``(n, width + 2)``, float32."""
        cols = self.inputs(rows, actions)
        out = np.zeros((len(cols), self.context_width + 2), np.float32)
        np.put_along_axis(out, cols.astype(np.int64), 1.0, axis=1)
        return out


class ReplayBuffer:
    """The last ``capacity`` interactions ``(row, action, reward)``, oldest overwritten."""

    def __init__(self, capacity=4096):
        check_int(capacity, "capacity", 1)
        self.capacity = capacity
        self.rows = np.zeros(capacity, np.int32)
        self.actions = np.zeros(capacity, np.uint8)
        self.rewards = np.zeros(capacity, np.float32)
        self.count = 0  # interactions ever added

    def __len__(self):
        return min(self.count, self.capacity)

    def add(self, row, action, reward):
        slot = self.count % self.capacity
        self.rows[slot], self.actions[slot], self.rewards[slot] = row, action, reward
        self.count += 1

    def sample(self, n, rng):
        """``n`` items drawn uniformly with replacement: ``(rows, actions, rewards)``."""
        if len(self) == 0:
            raise ValueError("the buffer is empty")
        i = rng.integers(0, len(self), size=n)
        return self.rows[i], self.actions[i], self.rewards[i]
