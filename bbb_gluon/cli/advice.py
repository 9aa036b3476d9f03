"""Settings that run but are unlikely to be what was meant: one line on stderr naming the
option to change, while the command goes on (a refusal would stop experiments that mean
them).
"""

import contextlib
import math
import sys
import warnings


def warn(command, message):
    print(f"bbb-gluon {command}: warning: {message}", file=sys.stderr, flush=True)


def warn_if_implausible(config):
    """``train``'s settings checked before any work: a starting sigma above the prior's
    widest scale puts the weights' noise beyond what the prior allows, and the first
    steps spend themselves shrinking it."""
    if not config.method.learns_posterior:
        return
    rho = max(config.rho_init) if isinstance(config.rho_init, list | tuple) \
        else config.rho_init
    sigma = rho + math.log1p(math.exp(-rho)) if rho > 0 else math.log1p(math.exp(rho))
    scale = config.prior.widest_scale()
    if scale is not None and sigma > scale:
        warn("train", f"--rho-init {rho:g} starts sigma at {sigma:.3g}, above the prior's "
                      f"scale {scale:.3g}: lower --rho-init (sigma 0.0486 at -3)")


@contextlib.contextmanager
def one_line_warnings(command, advice):
    """The library's warnings of the classes in ``advice`` (``{class: what to change}``)
    as one line each on stderr, not Python's two with a file name."""
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message, category, *args, **kwargs):
            fix = next((v for k, v in advice.items() if issubclass(category, k)), None)
            if fix is None:
                shown(message, category, *args, **kwargs)
            else:
                warn(command, f"{message}; {fix}")

        warnings.showwarning = show
        yield
