"""Tests for bbb_gluon.plotting: every figure function runs on tiny arrays, returns a
Figure with the expected number of axes, and writes a PNG when given a path."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure

from bbb_gluon import metrics, plotting


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def check(fig, num_axes, path):
    assert isinstance(fig, Figure)
    assert len(fig.axes) == num_axes
    assert path.stat().st_size > 0
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        f.read(8)  # the IHDR chunk's length and type, then width and height
        size = (int.from_bytes(f.read(4), "big"), int.from_bytes(f.read(4), "big"))
    # Saved uncropped (the figure laid out to fit): the whole canvas, with everything drawn
    # (labels, titles, legends, colour bars) inside it, nothing cut off at an edge.
    width, height = fig.get_size_inches()
    assert abs(size[0] - width * 110) <= 1 and abs(size[1] - height * 110) <= 1, size
    drawn = fig.get_tightbbox(fig.canvas.get_renderer())
    assert drawn.x0 >= 0 and drawn.y0 >= 0, drawn
    assert drawn.x1 <= width and drawn.y1 <= height, (drawn, width, height)


def test_weight_density(tmp_path):
    rng = np.random.default_rng(0)
    weights = {"Bayes by Backprop": rng.normal(0, 0.1, (20, 30)),
               "plain": rng.normal(0, 0.2, 500), "dropout": rng.laplace(0, 0.1, 500)}
    fig = plotting.plot_weight_density(weights, tmp_path / "w.png", bins=30)
    check(fig, 1, tmp_path / "w.png")
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == list(weights)


def test_validation_curves(tmp_path):
    curves = {"a": ([1, 2, 3], [0.05, 0.02, 0.018]), "b": ([1, 2], [0.04, 0.03])}
    fig = plotting.plot_validation_curves(curves, tmp_path / "v.png")
    check(fig, 1, tmp_path / "v.png")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [5.0, 2.0, 1.8])
    # Default limits: the lowest error is shown, the first epochs may be cut.
    low, high = ax.get_ylim()
    assert low <= 1.8 < high and high == pytest.approx(1.5 * np.median([1.8, 3.0]))
    with pytest.raises(ValueError):
        plotting.plot_validation_curves({})
    with pytest.raises(ValueError):
        plotting.plot_validation_curves({"a": ([1, 2], [0.1])})


def test_weight_density_needs_arrays():
    with pytest.raises(ValueError):
        plotting.plot_weight_density({})


@pytest.mark.parametrize("fn", [plotting.plot_snr_histogram, plotting.plot_snr_cdf])
def test_snr_plots_mark_the_cutoffs(tmp_path, fn):
    snr = np.array([0.0, 0.01, 0.5, 1.0, 3.0, 10.0, 40.0])  # 0: a mean of exactly 0
    cutoffs = {0.0: -np.inf, 0.5: 1.0, 0.75: 10.0, 1.0: np.inf}
    fig = fn(snr, cutoffs, path=tmp_path / "snr.png")
    check(fig, 1, tmp_path / "snr.png")
    ax = fig.axes[0]
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    # Only the fractions strictly between 0 and 1 have a finite cut-off to draw, in dB.
    assert sorted(line.get_xdata()[0] for line in dashed) == pytest.approx([0.0, 10.0])


def test_snr_cdf_reaches_one(tmp_path):
    fig = plotting.plot_snr_cdf([1.0, 10.0, 100.0], path=tmp_path / "c.png")
    line = fig.axes[0].get_lines()[0]
    np.testing.assert_allclose(line.get_xdata(), [0.0, 10.0, 20.0])
    np.testing.assert_allclose(line.get_ydata(), [1 / 3, 2 / 3, 1.0])


def test_least_certain_shows_the_highest_entropies(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.random((10, 784))
    entropy = np.arange(10) / 10.0
    predicted = np.arange(10) % 3
    fig = plotting.plot_least_certain(images, predicted, entropy, num_images=5, ncols=3,
                                      labels=np.zeros(10, int), path=tmp_path / "u.png")
    check(fig, 5, tmp_path / "u.png")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0] == "pred 0 (y 0)\nH=0.90"  # image 9 first: the most uncertain
    assert [t.split("H=")[1] for t in titles] == ["0.90", "0.80", "0.70", "0.60", "0.50"]


def test_least_certain_with_fewer_images_than_asked(tmp_path):
    fig = plotting.plot_least_certain(np.zeros((2, 28, 28)), [1, 2], [0.1, 0.2],
                                      path=tmp_path / "u.png")
    check(fig, 2, tmp_path / "u.png")


def test_reliability_diagram(tmp_path):
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.5, 0.5]])
    rel = metrics.reliability_data(probs, [0, 0, 0, 1], num_bins=4)
    fig = plotting.plot_reliability_diagram(rel, tmp_path / "r.png", ece=0.2)
    check(fig, 2, tmp_path / "r.png")
    assert "ECE 20.00%" in fig.axes[0].get_title()


@pytest.mark.parametrize("with_mi, num_axes", [(False, 1), (True, 2)])
def test_entropy_histograms(tmp_path, with_mi, num_axes):
    rng = np.random.default_rng(0)
    a, b = rng.random(50), rng.random(40) + 1
    mi = (rng.random(50), rng.random(40)) if with_mi else (None, None)
    fig = plotting.plot_entropy_histograms(a, b, *mi, path=tmp_path / "h.png")
    check(fig, num_axes, tmp_path / "h.png")


def test_plots_without_a_path_save_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fig = plotting.plot_snr_histogram([1.0, 2.0])
    assert isinstance(fig, Figure) and not list(tmp_path.iterdir())


def test_predictive_intervals_mark_the_misses(tmp_path):
    y = np.array([0.0, 1.0, 2.0, 3.0])
    mean = y + np.array([0.1, -0.1, 0.0, 2.0])
    fig = plotting.plot_predictive_intervals(y, mean, mean - 0.5, mean + 0.5,
                                             tmp_path / "p.png")
    check(fig, 1, tmp_path / "p.png")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("covers the truth (3)" in t for t in labels)
    assert any("misses it (1)" in t for t in labels)


def test_regression_bands_shade_each_band_under_the_mean(tmp_path):
    grid = np.linspace(-1, 1, 21)
    mean = np.sin(grid)
    bands = {"90%": (mean - 0.4, mean + 0.4), "50%": (mean - 0.1, mean + 0.1)}
    fig = plotting.plot_regression_bands(grid[::4], mean[::4], grid, mean, bands,
                                         truth=np.sin(grid), path=tmp_path / "b.png")
    check(fig, 1, tmp_path / "b.png")
    ax = fig.axes[0]
    assert len(ax.collections) == 2  # one shaded area per band
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["90%", "50%", "predictive mean", "truth", "data"]
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), mean)


def test_interval_coverage_draws_one_line_per_model(tmp_path):
    levels = [0.5, 0.8, 0.95]
    fig = plotting.plot_interval_coverage(levels, {"a": [0.5, 0.8, 0.95],
                                                   "b": [0.3, 0.5, 0.7]},
                                          tmp_path / "c.png")
    check(fig, 1, tmp_path / "c.png")
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["a", "b", "calibrated"]
    np.testing.assert_allclose(lines[1].get_ydata(), [0.3, 0.5, 0.7])


@pytest.mark.parametrize("title", [None, "MNIST, 2 x 400, a long title for the figure"])
@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_learning_curve_fits_its_labels(tmp_path, title, scale):
    # Its margins are fixed: nothing cut off, and the panels' labels clear of each other and
    # of the title, from costs of a few nats to millions and errors up to 100%.
    history = [{"epoch": e, "likelihood_cost": scale * 1000.0 / e,
                "complexity_cost": scale * (50.0 + e), "valid_error": 1.0 / e,
                "valid_error_mc": 0.9 / e} for e in range(1, 120)]
    fig = plotting.plot_learning_curve(history, tmp_path / "lc.png", title=title)
    check(fig, 2, tmp_path / "lc.png")
    assert [len(ax.lines) for ax in fig.axes] == [2, 2]
    renderer = fig.canvas.get_renderer()
    left, right = (ax.get_tightbbox(renderer) for ax in fig.axes)
    assert left.x1 < right.x0, (left, right)
    if title:
        assert max(left.y1, right.y1) < fig._suptitle.get_window_extent(renderer).y0


def test_grid_map_with_points_and_a_colour_bar(tmp_path):
    xx, yy = np.meshgrid(np.linspace(-2, 3, 20), np.linspace(-1, 2, 15))
    X = np.array([[0.0, 0.5], [1.0, -0.2], [2.0, 1.0]])
    fig = plotting.plot_grid_map(xx, yy, xx * yy, X, [0, 1, 1], title="predictive mean",
                                 label="p(class 1)", path=tmp_path / "g.png")
    check(fig, 2, tmp_path / "g.png")  # the map and its colour bar


def test_cumulative_regret_with_a_title(tmp_path):
    rng = np.random.default_rng(0)
    curves = {"Bayes by Backprop": np.cumsum(rng.uniform(0, 1, (3, 50)), axis=1),
              "greedy": np.cumsum(rng.uniform(0, 2, (3, 50)), axis=1)}
    fig = plotting.plot_cumulative_regret(curves, tmp_path / "r.png", title="One seed")
    check(fig, 1, tmp_path / "r.png")
    assert len(fig.axes[0].lines) == 2
