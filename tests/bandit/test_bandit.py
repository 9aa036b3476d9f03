"""The Mushroom bandit: environment, regret accounting, buffer, the compiled agents against
autograd, seeding, resume, and that the agents learn."""

import dataclasses
import json
import math
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd

from bbb_gluon import bandit, data
from bbb_gluon.bandit import engine
from bbb_gluon.core.priors import GaussianPrior, LaplacePrior, ScaleMixturePrior


@pytest.fixture(scope="module")
def env(mushroom_root):
    return bandit.MushroomBandit(data.load_mushroom(mushroom_root))


@pytest.fixture(scope="module")
def kernels():
    try:
        return engine.kernels()
    except RuntimeError as e:
        if os.environ.get("BBB_GLUON_REQUIRE_FUSED"):
            pytest.fail(str(e))
        pytest.skip(str(e))


def small(**kw):
    base = dict(steps=60, seeds=(0,), hidden=8, capacity=32, updates=3, batch=5)
    base.update(kw)
    return bandit.BanditConfig(**base)


# ---------------------------------------------------------------- environment
def test_draws_are_a_function_of_seed_and_step(env):
    rows, unlucky = env.draw(3, 0, 500)
    rows2, unlucky2 = env.draw(3, 200, 500)
    np.testing.assert_array_equal(rows[200:], rows2)
    np.testing.assert_array_equal(unlucky[200:], unlucky2)
    other, _ = env.draw(4, 0, 500)
    assert (other != rows).mean() > 0.99
    assert rows.min() >= 0 and rows.max() < 8124


def test_mushrooms_are_uniform_and_luck_is_a_fair_coin(env):
    rows, unlucky = env.draw(0, 0, 200_000)
    counts = np.bincount(rows, minlength=8124)
    # a multinomial's counts: mean 24.6, so a chi-square within a few sd of its df
    expected = len(rows) / 8124
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert abs(chi2 - 8123) < 6 * math.sqrt(2 * 8123)
    n = len(unlucky)
    assert abs(unlucky.mean() - 0.5) < 4 * math.sqrt(0.25 / n)


def test_reward_distribution(env):
    rows, unlucky = env.draw(1, 0, 100_000)
    edible = env.edible[rows] == 1
    eat = env.reward(rows, np.ones_like(rows), unlucky)
    assert set(np.unique(eat[edible])) == {5.0}
    poison = eat[~edible]
    assert set(np.unique(poison)) == {-35.0, 5.0}
    # -35 with probability 1/2: mean -15
    assert abs(poison.mean() + 15) < 4 * 20 / math.sqrt(len(poison))
    assert (env.reward(rows, np.zeros_like(rows), unlucky) == 0).all()


def test_regret_accounting(env):
    rows, unlucky = env.draw(2, 0, 5000)
    edible = env.edible[rows] == 1
    oracle = env.regret(rows, edible.astype(np.uint8), unlucky)
    assert (oracle == 0).all()
    never = env.regret(rows, np.zeros_like(rows), unlucky)
    assert never.sum() == 5 * edible.sum()
    always = env.regret(rows, np.ones_like(rows), unlucky)
    # eating everything: 35 per unlucky poisonous meal, -5 per lucky one
    bad = ~edible & (unlucky == 1)
    lucky = ~edible & (unlucky == 0)
    assert always.sum() == 35 * bad.sum() - 5 * lucky.sum()
    assert set(np.unique(always[lucky])) == {-5.0}


def test_inputs_and_one_hot_agree(env):
    rows = np.array([0, 5, 8123])
    cols = env.inputs(rows, [0, 1, 1])
    dense = env.one_hot(rows, [0, 1, 1])
    assert dense.shape == (3, 119)
    assert (dense.sum(1) == 23).all()
    for i in range(3):
        assert set(np.flatnonzero(dense[i])) == set(cols[i])
    assert dense[0, 117] == 1 and dense[1, 118] == 1


# ---------------------------------------------------------------- buffer
def test_buffer_keeps_the_last_items():
    buf = bandit.ReplayBuffer(4)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(1, np.random.default_rng(0))
    for i in range(6):
        buf.add(i, i % 2, float(i))
    assert len(buf) == 4 and buf.count == 6
    assert sorted(buf.rows.tolist()) == [2, 3, 4, 5]
    rows, actions, rewards = buf.sample(1000, np.random.default_rng(0))
    assert set(rows.tolist()) == {2, 3, 4, 5}
    np.testing.assert_array_equal(rewards, rows.astype(np.float32))
    np.testing.assert_array_equal(actions, rows % 2)
    with pytest.raises(ValueError):
        bandit.ReplayBuffer(0)


# ---------------------------------------------------------------- configuration
@pytest.mark.parametrize("kw, match", [
    (dict(steps=0), "steps"), (dict(seeds=()), "seeds"), (dict(seeds=(1, 1)), "seeds"),
    (dict(lr=-1.0), "lr"), (dict(prior="laplace"), "prior"), (dict(optimizer="rmsprop"),
                                                               "optimizer"),
    (dict(prior="mixture"), "unknown prior 'mixture'"), (dict(prior={"kind": "gaussian",
                                                                     "sigma": 0.0}), "sigma"),
    (dict(prior=ScaleMixturePrior(0.5, 1e20, 1.0)), "sigma1 must be at most"),
    (dict(noise_sigma=0.0), "noise_sigma"),
    (dict(complexity_over="epoch"), "complexity_over"),
    (dict(rho_lr_mult=0.0), "rho_lr_mult"), (dict(rho_lr_mult=float("inf")), "rho_lr_mult"),
    (dict(lr=1e10, rho_lr_mult=1e10), "rho_lr_mult"),
    (dict(adam_eps=0.0), "adam_eps"), (dict(adam_eps=float("nan")), "adam_eps"),
    (dict(act_draws="per-sample"), "act_draws"),
    (dict(agents=(bandit.AgentSpec("a", "greedy"), bandit.AgentSpec("a", "greedy"))),
     "distinct"),
])
def test_bad_configurations_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        bandit.BanditConfig(**kw)


def test_agent_specs_are_checked():
    with pytest.raises(ValueError, match="kind"):
        bandit.AgentSpec("x", "ucb")
    with pytest.raises(ValueError, match="epsilon"):
        bandit.AgentSpec("x", "greedy", 1.5)
    with pytest.raises(ValueError, match="sampling"):
        bandit.AgentSpec("x", "thompson", 0.1)
    for lr in (0.0, -1e-3, float("nan")):
        with pytest.raises(ValueError, match="lr"):
            bandit.AgentSpec("x", "greedy", lr=lr)
    with pytest.raises(ValueError, match="optimizer"):
        bandit.AgentSpec("x", "greedy", optimizer="rmsprop")


def test_config_round_trips_through_json():
    agents = (bandit.AgentSpec("bbb", "thompson"),
              bandit.AgentSpec("g", "greedy", lr=3e-4, optimizer="sgd"))
    c = bandit.BanditConfig(seeds=(3, 4), prior="gaussian", lr=0.01, agents=agents,
                            rho_lr_mult=0.1, complexity_over="blundell", adam_eps=1e-4,
                            act_draws="independent")
    back = bandit.BanditConfig.from_json(json.loads(json.dumps(c.to_json())))
    assert back == c
    assert (back.adam_eps, back.act_draws) == (1e-4, "independent")
    assert [back.agent_optimizer(a) for a in back.agents] == ["adam", "sgd"]
    assert [back.agent_lr(a) for a in back.agents] == [0.01, 3e-4]


@pytest.mark.parametrize("stored, prior", [
    ({"prior": "mixture", "prior_pi": 0.25, "prior_sigma1": 1.0, "prior_sigma2": 0.001,
      "prior_sigma": 1.0}, ScaleMixturePrior(0.25, 1.0, 0.001)),
    ({"prior": "gaussian", "prior_pi": 0.5, "prior_sigma1": 1.0, "prior_sigma2": 0.001,
      "prior_sigma": 0.5}, GaussianPrior(0.5)),
])
def test_a_config_written_before_the_bandit_shared_the_priors_reads_back(stored, prior):
    # results/bandit*: the prior as a name ("mixture", "gaussian") and four flat fields
    d = {**bandit.BanditConfig().to_json(), **stored}
    back = bandit.BanditConfig.from_json(d)
    assert back.prior == prior
    assert bandit.BanditConfig.from_json(back.to_json()) == back
    assert back.to_json()["prior"] == prior.to_dict()


def test_a_config_written_before_rho_lr_mult_and_agent_lr_reads_back():
    # round 1's run (results/bandit): every agent at the configuration's lr
    d = bandit.BanditConfig(lr=1e-3).to_json()
    for name in ("rho_lr_mult", "adam_eps", "act_draws"):
        del d[name]
    for a in d["agents"]:
        del a["lr"], a["optimizer"]
    back = bandit.BanditConfig.from_json(d)
    assert back.rho_lr_mult == 1.0 and [back.agent_lr(a) for a in back.agents] == [1e-3] * 4
    assert (back.adam_eps, back.act_draws) == (1e-8, "shared")  # what those runs used
    same = tuple(dataclasses.replace(a, lr=None) for a in bandit.PAPER_AGENTS)
    assert back == bandit.BanditConfig(lr=1e-3, agents=same)


def test_the_paper_agents_learn_at_their_tuned_rates():
    config = bandit.BanditConfig()
    assert {a.name: config.agent_lr(a) for a in config.agents} == {
        "bayes-by-backprop": 3e-4, "greedy": 1e-3, "1%-greedy": 1e-3, "5%-greedy": 1e-3}


def test_complexity_scales():
    seen, buffer, blundell = (small(updates=5, batch=4, complexity_over=o)
                              for o in ("seen", "buffer", "blundell"))
    assert engine.complexity_scale(seen, 9, 0, 7) == 1 / 10
    assert engine.complexity_scale(buffer, 9, 3, 7) == 1 / 7
    shares = [engine.complexity_scale(blundell, 9, u, 7) * 4 for u in range(5)]
    # beta_u = 2^(U-1-u) / (2^U - 1): halving from one update to the next, summing to 1
    np.testing.assert_allclose(shares, np.array([16, 8, 4, 2, 1]) / 31)
    assert engine.complexity_scale(blundell, 0, 0, 1) == engine.complexity_scale(blundell, 99,
                                                                                  0, 32)
    # thousands of updates: no overflow
    many = small(updates=5000, complexity_over="blundell")
    assert engine.complexity_scale(many, 0, 0, 1) == pytest.approx(0.5 / many.batch)
    assert engine.complexity_scale(many, 0, 4999, 1) == 0.0


# ---------------------------------------------------------------- kernels vs autograd
def _autograd_cost(config, width, mu, rho, eps, inputs, y, scale):
    """Mean Gaussian NLL (+ scale * (log q - log P) if rho is given) and its gradients,
    from the flat layout with MXNet operators and autograd."""
    mu_nd = mx.nd.array(mu, dtype="float64")
    mu_nd.attach_grad()
    rho_nd = None
    if rho is not None:
        rho_nd = mx.nd.array(rho, dtype="float64")
        rho_nd.attach_grad()
    dense = np.zeros((len(y), width + 2))
    np.put_along_axis(dense, inputs.astype(np.int64), 1.0, axis=1)
    X = mx.nd.array(dense, dtype="float64")
    with autograd.record():
        if rho_nd is None:
            w = mu_nd
        else:
            sigma = mx.nd.Activation(rho_nd, act_type="softrelu")
            w = mu_nd + sigma * mx.nd.array(eps, dtype="float64")
        # rebuild the layers from the flat vector by slicing (the kernel's layout)
        d, h = width + 2, config.hidden
        o = np.cumsum([0, d * h, h, h * h, h, h, 1])
        W1 = w[o[0]:o[1]].reshape((d, h))
        b1 = w[o[1]:o[2]]
        W2 = w[o[2]:o[3]].reshape((h, h))
        b2 = w[o[3]:o[4]]
        w3 = w[o[4]:o[5]].reshape((h, 1))
        b3 = w[o[5]:o[6]]
        z1 = mx.nd.relu(mx.nd.broadcast_add(mx.nd.dot(X, W1), b1.reshape((1, h))))
        z2 = mx.nd.relu(mx.nd.broadcast_add(mx.nd.dot(z1, W2), b2.reshape((1, h))))
        f = mx.nd.broadcast_add(mx.nd.dot(z2, w3), b3.reshape((1, 1))).reshape((-1,))
        yy = mx.nd.array(y, dtype="float64")
        cost = mx.nd.mean(mx.nd.square(f - yy)) / (2 * config.noise_sigma**2)
        nll = cost.copy()
        if rho_nd is not None:
            prior = config.make_prior()
            log_q = mx.nd.sum(-mx.nd.log(sigma) - 0.5 * mx.nd.array(eps, dtype="float64")**2
                              - 0.5 * math.log(2 * math.pi))
            if isinstance(prior, ScaleMixturePrior):
                def normal(x, s):
                    return mx.nd.exp(-0.5 * (x / s) ** 2) / (s * math.sqrt(2 * math.pi))
                log_p = mx.nd.sum(mx.nd.log(prior.pi * normal(w, prior.sigma1) +
                                            (1 - prior.pi) * normal(w, prior.sigma2)))
            else:
                s = prior.sigma
                log_p = mx.nd.sum(-0.5 * (w / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi))
            cost = cost + scale * (log_q - log_p)
    cost.backward()
    grads = [mu_nd.grad.asnumpy()] + ([] if rho_nd is None else [rho_nd.grad.asnumpy()])
    return float(nll.asscalar()), grads


def _minibatch(env, n, seed):
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, env.num_rows, n)
    actions = rng.integers(0, 2, n)
    y = rng.choice([-35.0, 0.0, 5.0], n).astype(np.float32)
    return env.inputs(rows, actions), y


@pytest.mark.parametrize("noise_sigma", [1.0, 3.0])
def test_kernel_gradient_of_a_plain_network_matches_autograd(env, kernels, noise_sigma):
    config = small(hidden=7, noise_sigma=noise_sigma)
    P = engine.num_params(env.context_width, 7)
    w = np.random.default_rng(0).normal(0, 0.3, P).astype(np.float32)
    inputs, y = _minibatch(env, 9, 1)
    nll, g = engine.kernel_gradients(config, env.context_width, w, inputs, y)
    ref_nll, (ref_g,) = _autograd_cost(config, env.context_width, w, None, None, inputs, y, 0.0)
    assert nll == pytest.approx(ref_nll, rel=1e-5)
    np.testing.assert_allclose(g, ref_g, rtol=1e-4, atol=1e-5 * np.abs(ref_g).max())
    assert np.abs(ref_g).max() > 0.1  # the check is not vacuous


@pytest.mark.parametrize("prior", [ScaleMixturePrior(0.5, 1.0, math.exp(-3)), GaussianPrior()],
                         ids=["scale_mixture", "gaussian"])
def test_kernel_gradient_of_a_posterior_matches_autograd(env, kernels, prior):
    config = small(hidden=6, prior=prior, noise_sigma=2.0)
    P = engine.num_params(env.context_width, 6)
    rng = np.random.default_rng(2)
    mu = rng.normal(0, 0.3, P).astype(np.float32)
    rho = rng.uniform(-6, 0, P).astype(np.float32)
    eps = rng.normal(0, 1, P).astype(np.float32)
    w = (mu.astype(np.float64) + np.logaddexp(0, rho.astype(np.float64)) * eps).astype(np.float32)
    inputs, y = _minibatch(env, 11, 3)
    scale = 1 / 40
    nll, gmu, grho = engine.kernel_gradients(config, env.context_width, w, inputs, y, eps=eps,
                                             mu=mu, rho=rho, scale=scale)
    ref_nll, (ref_mu, ref_rho) = _autograd_cost(config, env.context_width, mu, rho, eps, inputs,
                                                y, scale)
    assert nll == pytest.approx(ref_nll, rel=1e-4)
    for got, ref in ((gmu, ref_mu), (grho, ref_rho)):
        np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-4 * np.abs(ref).max())


@pytest.mark.parametrize("options", [
    {}, dict(complexity_over="blundell"), dict(complexity_over="buffer", rho_lr_mult=0.1),
    dict(greedy_lr=0.003, complexity_over="blundell", rho_lr_mult=3.0),
    dict(adam_eps=1e-3), dict(adam_eps=1e-4, act_draws="independent", rho_lr_mult=1e-6),
    dict(greedy_optimizer="sgd", greedy_lr=1.0),
    dict(optimizer="sgd", greedy_optimizer="adam", adam_eps=1e-4)])
def test_one_step_of_the_stacked_engine_replays_in_numpy(env, kernels, options):
    """The kernel's first step, replayed from its documented keys: minibatch slots, weight
    noise, gradients (checked against autograd above), the complexity weighting and
    MXNet's Adam at each agent's learning rates."""
    options = dict(options)
    greedy_lr = options.pop("greedy_lr", None)
    greedy_optimizer = options.pop("greedy_optimizer", None)
    agents = (bandit.AgentSpec("bbb", "thompson"),
              bandit.AgentSpec("greedy", "greedy", lr=greedy_lr, optimizer=greedy_optimizer))
    config = small(steps=2, updates=3, batch=4, hidden=5, agents=agents, lr=0.01, **options)
    stacked = bandit.StackedAgents(config, env)
    mu0, rho0 = stacked.mu.copy(), stacked.rho.copy()
    rows, actions, rewards, _ = stacked.run(1, threads=1)
    for i, spec in enumerate(agents):
        key = int(stacked.key[i])
        inputs = env.inputs(rows[i, :1], actions[i, :1])
        y = rewards[i, :1]
        mu, rho = mu0[i].astype(np.float32).copy(), rho0[i].copy()
        state = {k: np.zeros_like(mu) for k in ("m_mu", "v_mu", "m_rho", "v_rho")}
        rate = {"m_mu": config.agent_lr(spec), "m_rho": config.agent_lr(spec) *
                config.rho_lr_mult}
        for u in range(config.updates):
            slots = engine.minibatch_indices(key, 0, u, config.updates, config.batch, 1)
            assert (slots == 0).all()  # one item stored
            xb, yb = inputs[slots], y[slots]
            step = u + 1
            if spec.kind == "thompson":
                eps = engine.kernel_noise(engine.update_noise_key(key, 0, u, config.updates),
                                          len(mu))
                w = (mu + np.logaddexp(0, rho).astype(np.float32) * eps).astype(np.float32)
                scale = engine.complexity_scale(config, 0, u, 1)
                _, gmu, grho = engine.kernel_gradients(config, env.context_width, w, xb, yb,
                                                       eps=eps, mu=mu, rho=rho, scale=scale)
                grads = ((mu, gmu, "m_mu", "v_mu"), (rho, grho, "m_rho", "v_rho"))
            else:
                _, g = engine.kernel_gradients(config, env.context_width, mu, xb, yb)
                grads = ((mu, g, "m_mu", "v_mu"),)
            for x, g, m, v in grads:
                if config.agent_optimizer(spec) == "sgd":
                    x -= (rate[m] * g).astype(np.float32)
                    continue
                # MXNet's Adam, as the kernel applies it
                state[m] = 0.9 * state[m] + 0.1 * g
                state[v] = 0.999 * state[v] + 0.001 * g * g
                lr = rate[m] * math.sqrt(1 - 0.999**step) / (1 - 0.9**step)
                x -= (lr * state[m] / (np.sqrt(state[v]) + config.adam_eps)).astype(
                    np.float32)
        np.testing.assert_allclose(stacked.mu[i], mu, rtol=1e-4, atol=1e-6)
        if spec.kind == "thompson":
            np.testing.assert_allclose(stacked.rho[i], rho, rtol=1e-4, atol=1e-6)
        else:
            np.testing.assert_array_equal(stacked.rho[i], rho0[i])  # untouched
        assert np.abs(stacked.mu[i] - mu0[i]).max() > 1e-3  # it did move


def test_minibatch_slots_cover_the_buffer_uniformly():
    slots = np.concatenate([engine.minibatch_indices(99, t, 0, 64, 64, 37) for t in range(300)])
    counts = np.bincount(slots, minlength=37)
    assert counts.min() > 0 and slots.max() < 37
    expected = len(slots) / 37
    assert ((counts - expected) ** 2 / expected).sum() < 36 + 6 * math.sqrt(72)


# ---------------------------------------------------------------- the runner
def test_runs_are_reproducible_and_seeds_differ(env, kernels):
    config = small(seeds=(0, 1), agents=bandit.PAPER_AGENTS)
    a = bandit.run_bandit(config, env, progress=False, threads=1)
    b = bandit.run_bandit(config, env, progress=False, threads=2)
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    assert a.rows.shape == (2, 4, 60)
    # every agent of a seed meets the same mushrooms; the seeds meet different ones
    assert (a.rows[0] == a.rows[0, :1]).all()
    assert (a.rows[0, 0] != a.rows[1, 0]).mean() > 0.9
    regret = np.stack([env.regret(a.rows[s, j], a.actions[s, j],
                                  env.draw(config.seeds[s], 0, 60)[1])
                       for s in range(2) for j in range(4)]).reshape(2, 4, 60)
    np.testing.assert_array_equal(a.regret, regret)
    np.testing.assert_array_equal(a.rewards, np.stack(
        [env.reward(a.rows[s, j], a.actions[s, j], env.draw(config.seeds[s], 0, 60)[1])
         for s in range(2) for j in range(4)]).reshape(2, 4, 60))


def test_epsilon_sets_the_exploration_rate(env, kernels):
    agents = (bandit.AgentSpec("always", "greedy", 1.0),)
    config = small(steps=400, agents=agents, updates=0)
    r = bandit.run_bandit(config, env, progress=False)
    # epsilon = 1: every action is a coin flip
    assert abs(r.actions.mean() - 0.5) < 4 * math.sqrt(0.25 / 400)


def test_run_folder_files(env, kernels, tmp_path):
    config = small(seeds=(0, 1))
    r = bandit.run_bandit(config, env, out=tmp_path / "run", progress=False)
    out = tmp_path / "run"
    for name in ("config.json", "checkpoint.npz", "steps.csv.gz", "regret.csv",
                 "metrics.json", "regret.png"):
        assert (out / name).is_file(), name
    metrics = json.loads((out / "metrics.json").read_text())
    # where its numbers replay: the CPU and the kernels' build (the threads do not matter)
    assert metrics["machine"]["cpu"]["model"] and metrics["machine"]["kernels"]["flags"]
    cum = r.cumulative_regret
    for j, spec in enumerate(config.agents):
        m = metrics["agents"][spec.name]
        assert m["cumulative_regret"] == pytest.approx(cum[:, j, -1].mean())
        assert m["cumulative_regret_per_seed"] == pytest.approx(cum[:, j, -1].tolist())
    import csv
    import gzip
    with gzip.open(out / "steps.csv.gz", "rt") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 60
    last = [row for row in rows if row["seed"] == "1"]
    total = sum(float(row["greedy:regret"]) for row in last)
    assert total == cum[1, 1, -1]
    with open(out / "regret.csv") as f:
        curve = list(csv.DictReader(f))
    assert float(curve[-1]["greedy:mean"]) == pytest.approx(cum[:, 1, -1].mean(), abs=0.05)


def test_an_existing_run_is_not_overwritten(env, kernels, tmp_path):
    config = small(steps=10)
    bandit.run_bandit(config, env, out=tmp_path, progress=False)
    before = (tmp_path / "metrics.json").read_bytes()
    with pytest.raises(FileExistsError, match="--resume"):
        bandit.run_bandit(config, env, out=tmp_path, progress=False)
    assert (tmp_path / "metrics.json").read_bytes() == before
    with pytest.raises(ValueError, match="different configuration"):
        bandit.run_bandit(small(steps=10, lr=0.5), env, out=tmp_path, resume=True,
                          progress=False)


def assert_resumes_to(whole, env, folder, t):
    """The checkpoint in ``folder`` is at step ``t``, and resuming it gives ``whole``."""
    with np.load(folder / "checkpoint.npz") as z:
        assert int(z["t"]) == t
    resumed = bandit.run_bandit(None, env, out=folder, resume=True, progress=False, chunk=7,
                                checkpoint_every=10)
    for name in ("rows", "actions", "rewards", "regret"):
        np.testing.assert_array_equal(getattr(resumed, name), getattr(whole, name))


def test_resume_gives_the_uninterrupted_result(env, kernels, tmp_path, monkeypatch):
    config = small(steps=50, seeds=(0, 1))
    whole = bandit.run_bandit(config, env, out=tmp_path / "whole", progress=False, chunk=7,
                              checkpoint_every=10)
    calls = {"n": 0}
    real = bandit.StackedAgents.run

    def dying(self, n, threads=None):
        calls["n"] += 1
        if calls["n"] == 5:  # after the checkpoint at step 20, mid-way to 30
            raise KeyboardInterrupt
        return real(self, n, threads)

    monkeypatch.setattr(bandit.StackedAgents, "run", dying)
    with pytest.raises(KeyboardInterrupt):
        bandit.run_bandit(config, env, out=tmp_path / "cut", progress=False, chunk=7,
                          checkpoint_every=10)
    monkeypatch.setattr(bandit.StackedAgents, "run", real)
    assert not (tmp_path / "cut" / "metrics.json").exists()
    assert_resumes_to(whole, env, tmp_path / "cut", 20)
    with np.load(tmp_path / "whole" / "checkpoint.npz") as a, \
            np.load(tmp_path / "cut" / "checkpoint.npz") as b:
        for k in bandit.StackedAgents.STATE:
            np.testing.assert_array_equal(a[k], b[k])


def test_a_corrupt_checkpoint_is_reported_and_kept(env, kernels, tmp_path):
    config = small(steps=20)
    bandit.run_bandit(config, env, out=tmp_path, progress=False, checkpoint_every=10)
    ckpt = tmp_path / "checkpoint.npz"
    ckpt.write_bytes(b"not a checkpoint")
    with pytest.raises(bandit.BanditCheckpointError, match="unreadable"):
        bandit.run_bandit(None, env, out=tmp_path, resume=True, progress=False)
    assert ckpt.read_bytes() == b"not a checkpoint"


def test_the_agents_learn(env, kernels):
    """Over the second half of 800 steps Bayes by Backprop and 5%-greedy (default settings,
    but a smaller network and fewer updates, so both at 10⁻³) cost well under what never
    eating would (5 per edible mushroom), and less than in the first half. (The greedy
    agent may legitimately stop eating altogether: the failure the paper's Figure 6 shows.)"""
    agents = (bandit.PAPER_AGENTS[0], bandit.PAPER_AGENTS[3])
    config = bandit.BanditConfig(steps=800, seeds=(0, 1), updates=16, hidden=32, agents=agents,
                                 lr=1e-3)
    r = bandit.run_bandit(config, env, progress=False)
    for s in range(2):
        never = 5 * (env.edible[r.rows[s, 0, 400:]] == 1).sum()
        for j, spec in enumerate(config.agents):
            late, early = r.regret[s, j, 400:].sum(), r.regret[s, j, :400].sum()
            assert late < 0.6 * never, (spec.name, s, late, never)
            assert late < early, (spec.name, s)


# ---------------------------------------------------------------- the Gluon agents
@pytest.mark.parametrize("kind", ["thompson", "greedy"])
def test_gluon_agents_learn(env, kind):
    config = bandit.BanditConfig(hidden=16, updates=4, batch=16, lr=0.01)
    agent = (bandit.ThompsonAgent(env, config, seed=0) if kind == "thompson"
             else bandit.GreedyAgent(env, config, seed=0, lr=0.01))
    rows, actions, rewards, regret = bandit.run_agent(agent, 240)
    assert len(agent.buffer) == 240
    never = 5 * (env.edible[rows[120:]] == 1).sum()
    assert regret[120:].sum() < 0.6 * never
    np.testing.assert_array_equal(rewards, env.reward(rows, actions, env.draw(0, 0, 240)[1]))


def test_gluon_greedy_agent_learns_at_the_greedy_rate(env):
    """As in the stacked engine, the epsilon-greedy agent's rate is its own (GREEDY_LR by
    default), not the configuration's, which is Bayes by Backprop's."""
    config = bandit.BanditConfig(hidden=8)
    assert config.lr != bandit.GREEDY_LR
    agent = bandit.GreedyAgent(env, config, seed=0)
    assert agent.trainer.learning_rate == bandit.GREEDY_LR
    assert [config.agent_lr(s) for s in bandit.PAPER_AGENTS if s.kind == "greedy"] == \
        [bandit.GREEDY_LR] * 3
    assert bandit.GreedyAgent(env, config, seed=0, lr=0.02).trainer.learning_rate == 0.02
    with pytest.raises(ValueError, match="lr"):
        bandit.GreedyAgent(env, config, seed=0, lr=0.0)


@pytest.mark.parametrize("over", ["seen", "buffer", "blundell"])
def test_gluon_thompson_agent_weights_the_complexity_as_the_engine(env, over, monkeypatch):
    config = bandit.BanditConfig(hidden=4, updates=3, batch=8, capacity=2, complexity_over=over)
    agent = bandit.ThompsonAgent(env, config, seed=0, engine="reference")
    seen = []
    step = agent.step.__call__
    monkeypatch.setattr(type(agent.step), "__call__",
                        lambda self, X, y: (seen.append(self.loss.weighting), step(X, y))[1])
    for n in (1, 2, 3):
        agent.observe(n, 1, 5.0)
    # the loss weights the complexity against the minibatch's summed NLL: B * scale
    expected = [8 * engine.complexity_scale(config, t, u, min(t + 1, 2))
                for t in range(3) for u in range(3)]
    np.testing.assert_allclose(seen, expected)
    if over == "blundell":
        assert seen[:3] == pytest.approx([8 * 4 / 7 / 8, 8 * 2 / 7 / 8, 8 * 1 / 7 / 8])
    else:
        assert seen[-1] == pytest.approx(8 / (3 if over == "seen" else 2))
    assert isinstance(agent.prior, (ScaleMixturePrior, GaussianPrior))


def test_gluon_thompson_agent_learns_rho_at_its_multiple(env):
    config = bandit.BanditConfig(hidden=4, updates=1, batch=4, rho_lr_mult=0.25)
    agent = bandit.ThompsonAgent(env, config, seed=0)
    assert {p.lr_mult for p in agent.posterior.rho_parameters} == {0.25}
    assert {p.lr_mult for p in agent.posterior.mu_parameters} == {1.0}


def test_each_agent_learns_at_its_own_rate(env, kernels):
    runs = []
    for greedy_lr in (None, 0.05):
        agents = (bandit.AgentSpec("bbb", "thompson"),
                  bandit.AgentSpec("greedy", "greedy", lr=greedy_lr))
        stacked = bandit.StackedAgents(small(agents=agents, lr=0.01), env)
        stacked.run(5, threads=1)
        runs.append(stacked)
    np.testing.assert_array_equal(runs[0].mu[0], runs[1].mu[0])
    np.testing.assert_array_equal(runs[0].rho[0], runs[1].rho[0])
    assert np.abs(runs[0].mu[1] - runs[1].mu[1]).max() > 1e-3


def test_complexity_over_changes_only_the_bayesian_agents(env, kernels):
    agents = (bandit.AgentSpec("bbb", "thompson"), bandit.AgentSpec("greedy", "greedy"))
    runs = {}
    for over in ("seen", "buffer"):
        stacked = bandit.StackedAgents(small(capacity=2, agents=agents, complexity_over=over),
                                       env)
        stacked.run(6, threads=1)
        runs[over] = stacked
    # past step 2 the buffer holds 2 items but 3..6 interactions were seen
    assert np.abs(runs["seen"].rho[0] - runs["buffer"].rho[0]).max() > 1e-4
    np.testing.assert_array_equal(runs["seen"].mu[1], runs["buffer"].mu[1])


@pytest.mark.parametrize("act_draws", ["shared", "independent"])
def test_thompson_decisions_agree_across_engines(env, kernels, act_draws):
    """On the same draws, the stacked engine, its NumPy mirror and the Gluon ThompsonAgent
    take the same action at every step (shared or independent draws per action)."""
    config = small(steps=40, hidden=6, updates=1, batch=2, act_samples=2, mu_init=0.5,
                   rho_init=0.0, act_draws=act_draws,
                   agents=(bandit.AgentSpec("bbb", "thompson"),))
    other = dataclasses.replace(config, act_draws=({"shared", "independent"} - {act_draws}).pop())
    stacked = bandit.StackedAgents(config, env)
    agent = bandit.ThompsonAgent(env, config, seed=0, engine="reference")
    width, key, P = env.context_width, int(stacked.key[0]), stacked.P
    taken, differs = [], 0
    for t in range(config.steps):
        mu, rho = stacked.mu[0].copy(), stacked.rho[0].copy()  # the engine learns each step
        rows, actions, _, _ = stacked.run(1, threads=1)
        row, action = int(rows[0, 0]), int(actions[0, 0])
        inputs = env.inputs([row, row], [bandit.PASS, bandit.EAT])
        mirror, _ = engine.thompson_action(config, width, mu, rho, inputs, key, t)
        for params, flat in ((agent.posterior.mu_parameters, mu),
                             (agent.posterior.rho_parameters, rho)):
            arrays = [x for layer in engine.split_params(flat, width, config.hidden)
                      for x in layer]
            for p, x in zip(params, arrays, strict=True):
                p.set_data(mx.nd.array(x.reshape(p.shape)))
        eps = [[engine.gluon_order(engine.kernel_noise(k, P), width, config.hidden)
                for k in engine.act_noise_keys(key, t, s, act_draws)]
               for s in range(config.act_samples)]
        assert (action, mirror, agent.act(row, eps=eps)) == (action,) * 3, t
        taken.append(action)
        differs += engine.thompson_action(other, width, mu, rho, inputs, key, t)[0] != action
    assert 0 < sum(taken) < len(taken)  # both actions occur
    assert differs > 0  # the two ways of drawing do decide differently


def test_independent_draws_change_only_the_thompson_agents(env, kernels):
    agents = (bandit.AgentSpec("bbb", "thompson"), bandit.AgentSpec("greedy", "greedy", 0.1))
    runs = {}
    for draws in ("shared", "independent"):
        r = bandit.run_bandit(small(steps=200, agents=agents, act_draws=draws, rho_init=-1.0),
                              env, progress=False, threads=1)
        runs[draws] = r.actions
    assert (runs["shared"][:, 0] != runs["independent"][:, 0]).any()
    np.testing.assert_array_equal(runs["shared"][:, 1], runs["independent"][:, 1])


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_gluon_agents_use_the_configured_optimizer_and_adam_epsilon(env, optimizer):
    config = bandit.BanditConfig(hidden=4, updates=1, batch=4, optimizer=optimizer,
                                 adam_eps=1e-3)
    other = "sgd" if optimizer == "adam" else "adam"
    for agent, expected in ((bandit.ThompsonAgent(env, config, seed=0), optimizer),
                            (bandit.GreedyAgent(env, config, seed=0), optimizer),
                            (bandit.GreedyAgent(env, config, seed=0, optimizer=other), other)):
        trainer = agent.step.trainer if isinstance(agent, bandit.ThompsonAgent) \
            else agent.trainer
        opt = trainer._optimizer
        assert type(opt).__name__.lower() == expected
        if expected == "adam":
            assert opt.epsilon == 1e-3
    with pytest.raises(ValueError, match="optimizer"):
        bandit.GreedyAgent(env, config, seed=0, optimizer="rmsprop")


def test_adam_epsilon_act_draws_and_greedy_optimizer_reach_the_run_folder(env, kernels,
                                                                         mushroom_root,
                                                                         tmp_path):
    from bbb_gluon.cli import main

    out = tmp_path / "bandit"
    assert main(["bandit", "--out", str(out), "--data-dir", str(mushroom_root), "--steps", "3",
                 "--seeds", "1", "--updates", "2", "--hidden", "4", "--no-progress",
                 "--adam-eps", "1e-4", "--act-draws", "independent",
                 "--greedy-optimizer", "sgd"]) == 0
    config = json.loads((out / "config.json").read_text())["config"]
    assert (config["adam_eps"], config["act_draws"]) == (1e-4, "independent")
    assert {a["name"]: a["optimizer"] for a in config["agents"]} == {
        "bayes-by-backprop": None, "greedy": "sgd", "1%-greedy": "sgd", "5%-greedy": "sgd"}
    back = bandit.BanditConfig.from_json(config)
    assert (back.adam_eps, back.act_draws) == (1e-4, "independent")
    # a larger epsilon moves the weights less than the default's near-sign steps
    moved = {}
    for eps in (1e-8, 1.0):
        stacked = bandit.StackedAgents(small(steps=5, adam_eps=eps), env)
        mu0 = stacked.mu.copy()
        stacked.run(5, threads=1)
        moved[eps] = np.abs(stacked.mu - mu0).mean()
    assert moved[1.0] < 0.5 * moved[1e-8]


def test_a_failing_checkpoint_write_names_the_file_and_resume_works(env, kernels, tmp_path,
                                                                    failing_disk):
    from bbb_gluon import FileWriteError

    config = small(steps=50, seeds=(0, 1))
    whole = bandit.run_bandit(config, env, out=tmp_path / "whole", progress=False, chunk=7,
                              checkpoint_every=10)
    failing_disk("checkpoint.npz", nth=3)  # the write at step 30
    with pytest.raises(FileWriteError, match="could not write .*checkpoint.npz: No space"):
        bandit.run_bandit(config, env, out=tmp_path / "cut", progress=False, chunk=7,
                          checkpoint_every=10)
    assert not list((tmp_path / "cut").glob(".tmp-*"))
    assert_resumes_to(whole, env, tmp_path / "cut", 20)  # the previous checkpoint, intact


def test_a_failing_result_write_keeps_the_checkpoint(env, kernels, tmp_path, failing_disk):
    from bbb_gluon import FileWriteError

    config = small(steps=20)
    failing_disk("metrics.json")
    with pytest.raises(FileWriteError, match="metrics.json"):
        bandit.run_bandit(config, env, out=tmp_path, progress=False, checkpoint_every=10)
    with np.load(tmp_path / "checkpoint.npz") as z:
        assert int(z["t"]) == 20
    result = bandit.run_bandit(None, env, out=tmp_path, resume=True, progress=False)
    assert (tmp_path / "metrics.json").is_file() and result.regret.shape[-1] == 20


def test_ctrl_c_stops_at_a_chunk_with_a_checkpoint_and_resume_continues(env, kernels,
                                                                        tmp_path,
                                                                        monkeypatch):
    import os
    import signal

    config = small(steps=50, seeds=(0, 1))
    whole = bandit.run_bandit(config, env, out=tmp_path / "whole", progress=False, chunk=7,
                              checkpoint_every=10)
    real = bandit.StackedAgents.run
    calls = {"n": 0}

    def interrupted(self, n, threads=None):
        calls["n"] += 1
        if calls["n"] == 5:  # a Ctrl-C while the kernels run steps 21 to 27 (chunks
            # end at 7, 10, 17, 20, 27: a chunk never crosses a checkpoint)
            os.kill(os.getpid(), signal.SIGINT)
        return real(self, n, threads)

    monkeypatch.setattr(bandit.StackedAgents, "run", interrupted)
    with pytest.raises(bandit.BanditInterrupted, match="stopped at step 27") as info:
        bandit.run_bandit(config, env, out=tmp_path / "cut", progress=False, chunk=7,
                          checkpoint_every=10)
    assert info.value.t == 27 and info.value.exit_status == 130
    monkeypatch.setattr(bandit.StackedAgents, "run", real)
    assert_resumes_to(whole, env, tmp_path / "cut", 27)


def test_a_corrupt_config_is_reported_and_kept(env, kernels, tmp_path):
    bandit.run_bandit(small(steps=20), env, out=tmp_path, progress=False, checkpoint_every=10)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(bandit.BanditCheckpointError, match="config.json is not"):
        bandit.run_bandit(None, env, out=tmp_path, resume=True, progress=False)
    assert (tmp_path / "config.json").read_text() == "{not json"


def test_a_prior_the_bandits_kernels_lack_is_refused_naming_the_ones_to_use():
    with pytest.raises(ValueError, match=r"no code for the prior LaplacePrior.*use "
                                         r"'scale_mixture' \(ScaleMixturePrior\) or "
                                         r"'gaussian' \(GaussianPrior\)"):
        bandit.BanditConfig(prior=LaplacePrior(1.0))
