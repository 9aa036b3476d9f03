"""The pilot that chose experiments/uci_benchmark.py's grid: split 0's validation rows
(load_uci(..., validation=0.2)) of Boston, then Yacht, for lr 1e-2, 3e-3, 1e-3 with
N(0, 1) and N(0, 0.3^2) priors; the validation log-likelihood/RMSE at ten points along
training, with the benchmark script as first written (STEPS = 10,000, Boston 833 epochs;
4328c3f committed it with 8,000). Run from the repository root; its output, stopped
during Yacht, is results/uci-pilot/out.txt.

    BBB_GLUON_DATA=... OMP_NUM_THREADS=1 python experiments/uci_pilot.py boston yacht
"""

import sys
import time

sys.path.insert(0, "experiments")  # uci_benchmark is a script there
import uci_benchmark as ub  # noqa: E402

from bbb_gluon.data import load_uci  # noqa: E402

grid = [{"lr": lr, "prior_sigma": p} for lr in (1e-2, 3e-3, 1e-3) for p in (1.0, 0.3)]
for name in sys.argv[1:]:
    v = load_uci(name, 0, validation=0.2)
    epochs = ub.epoch_budget(len(v.X_train), v.epochs, False)
    at = sorted({max(1, round(epochs * (k + 1) / 10)) for k in range(10)})
    for k, s in enumerate(grid):
        t = time.perf_counter()
        _, curve = ub.train(v, s, epochs, seed=k, score_at=at)
        print(name, s, f"{time.perf_counter() - t:.0f}s",
              " ".join(f"{c['epoch']}:{c['log_likelihood']:.3f}/{c['rmse']:.2f}" for c in curve),
              flush=True)
