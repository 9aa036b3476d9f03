"""What ``bbb-gluon evaluate`` reports about a trained model, as a library function.

:func:`evaluate_model` takes a network (with its posterior, for Bayes by Backprop), test
data and optionally out-of-distribution data, and returns plain numbers (test errors,
NLL, Brier score, expected calibration error, detection AUROCs) together with the arrays
the figures are drawn from. A notebook calls it directly; the command line adds only the
run folder, the files and the printing.
"""

from dataclasses import dataclass

from . import metrics
from ._checks import as_array, check_class_labels, check_int
from .core.likelihood import likelihood_of
from .methods import METHODS, method_of
from .prediction import check_posterior, checked_inputs, error_rate, predict_proba, uncertainty

__all__ = ["Evaluation", "evaluate_model", "PREDICTIVES"]

# What each method's predictive averages over, in the reports' words.
PREDICTIVES = {name: method.predictive for name, method in METHODS.items()}


@dataclass
class Evaluation:
    """What :func:`evaluate_model` returns.

    Attributes
    ----------
    summary : dict
        Plain numbers (JSON-ready): ``test_error_means``, ``test_error_mc`` (None for a
        plain network), ``nll``, ``brier``, ``ece`` of the predictive, ``means`` (the same
        three with the means alone; not for a plain network), mean predictive entropy and
        mutual information, ``ood`` (AUROCs, or None), ``reliability`` (the bins).
    probs : numpy.ndarray
        The predictive's class probabilities on the test inputs, ``(N, C)``.
    uncertainty_in, uncertainty_out : dict
        :func:`~bbb_gluon.uncertainty` of the test inputs and of the OOD inputs (None).
    """

    summary: dict
    probs: object
    uncertainty_in: dict
    uncertainty_out: dict | None


# A user's entry point: every keyword is documented with its default.
def evaluate_model(net, posterior, X, y, model="bbb", samples=100, X_ood=None, bins=15,
                   ctx=None, likelihood="softmax"):
    """Test error, calibration and out-of-distribution detection of one model.

    Parameters
    ----------
    net : gluon.Block
    posterior : Posterior or None
        Needed for ``model="bbb"``; None for the others.
    X, y : numpy.ndarray or NDArray
        Test inputs ``(N, ...)`` and integer labels ``(N,)``.
    model : {"bbb", "dropout", "plain"}
        Which predictive to use: Monte-Carlo over weight samples, MC dropout, or the
        network's softmax.
    samples : int, default 100
        Weight samples or dropout masks of the predictive (unused for "plain").
    X_ood : numpy.ndarray or NDArray, optional
        Inputs of another dataset; their predictive entropy (and mutual information)
        against the test inputs' gives the detection AUROCs.
    bins : int, default 15
        Equal-width confidence bins of the ECE and the reliability diagram.
    ctx : Context, optional
    likelihood : {"softmax", "bernoulli"}

    Returns
    -------
    Evaluation
    """
    check_posterior(posterior, "evaluate_model")
    if not isinstance(model, str) or model not in METHODS:
        raise ValueError(f"model must be one of {sorted(METHODS)}, got {model!r}")
    method = method_of(model)
    if method.learns_posterior and posterior is None:
        raise ValueError(f"model={model!r} needs its posterior")
    check_int(samples, "samples", 1)
    check_int(bins, "bins", 1)
    bayesian = method.samples
    posterior = posterior if method.learns_posterior else None  # what the predictive runs with
    # The arrays, before any work: X and X_ood as predict_proba checks them, y against
    # the classes of the network's output.
    X, ctx, out = checked_inputs(net, posterior, X, ctx)
    if X_ood is not None:
        X_ood = checked_inputs(net, posterior, X_ood, ctx, "X_ood")[0]
    y = as_array(y, "the labels y")
    if y.shape != (len(X),):
        raise ValueError(f"the labels y must have shape ({len(X)},), one per example of X, "
                         f"got {y.shape}")
    likelihood = likelihood_of(likelihood)
    if not likelihood.classifies:
        raise ValueError(f"evaluate_network reports a classifier (error rates, calibration), "
                         f"so it takes likelihood='softmax' or 'bernoulli', got "
                         f"{likelihood.name!r}")
    check_class_labels(y, likelihood.num_classes(out.shape[-1]), "the labels y")

    def predictive(inputs):
        return uncertainty(net, posterior, inputs, samples, ctx=ctx, likelihood=likelihood,
                           mc_dropout=method.mc_dropout, keep_samples=False)

    probs_means = predict_proba(net, posterior, X, 0, ctx=ctx, likelihood=likelihood)
    u_in = predictive(X)
    probs = u_in["probs"]
    calibration = metrics.calibration_summary(probs, y, bins)
    reliability = metrics.reliability_data(probs, y, bins)
    summary = {
        "predictive": method.predictive,
        "samples": samples if bayesian else None,
        "num_test": int(len(y)),
        "test_error_means": error_rate(probs_means, y),
        "test_error_mc": calibration["error"] if bayesian else None,
        "nll": calibration["nll"], "brier": calibration["brier"], "ece": calibration["ece"],
        "ece_bins": bins,
        "mean_predictive_entropy": float(u_in["predictive_entropy"].mean()),
        "mean_mutual_information": (float(u_in["mutual_information"].mean())
                                    if bayesian else None),
    }
    if bayesian:
        means = metrics.calibration_summary(probs_means, y, bins)
        summary["means"] = {k: means[k] for k in ("nll", "brier", "ece")}
    u_out = None
    summary["ood"] = None
    if X_ood is not None:
        u_out = predictive(X_ood)
        summary["ood"] = {
            "num_examples": int(len(X_ood)),
            "auroc_entropy": metrics.auroc(u_in["predictive_entropy"],
                                           u_out["predictive_entropy"]),
            "auroc_mutual_information": (
                metrics.auroc(u_in["mutual_information"], u_out["mutual_information"])
                if bayesian else None),
            "mean_predictive_entropy": float(u_out["predictive_entropy"].mean()),
        }
    summary["reliability"] = {k: reliability[k].tolist()
                              for k in ("edges", "count", "confidence", "accuracy")}
    return Evaluation(summary, probs, u_in, u_out)
