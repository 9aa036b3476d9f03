"""Score one screening run on its validation split (experiments/screen.sh).

    python experiments/screen_score.py RUN_DIR

Writes RUN_DIR/screen.json: the end-of-training network's validation error with the means,
unpruned and with 95% of the weights removed by |mu|/sigma (and by |mu|), and its test error
unpruned, for comparing the schedule's ranking with the committed 600-epoch runs.
"""
import json
import sys
from pathlib import Path

import mxnet as mx

from bbb_gluon import data
from bbb_gluon.pruning import evaluate_pruning
from bbb_gluon.training import load_run


def main(run_dir):
    ctx = mx.cpu()
    net, posterior, config, meta = load_run(run_dir, "latest", ctx=ctx)
    stored = json.loads((Path(run_dir) / "config.json").read_text())["data"]
    splits = data.load_dataset(stored["dataset"], transform=stored["transform"],
                               num_valid=stored["num_valid"], seed=config.seed,
                               subset=stored["subset"])
    scores = {"epoch": meta["epoch"]}
    for split in ("valid", "test"):
        X, y = getattr(splits, split)
        rows = evaluate_pruning(net, posterior, X, y, [0.0, 0.95], ctx=ctx,
                                likelihood=config.likelihood)
        scores[f"{split}_error"] = rows[0]["error_by_snr"]
        scores[f"{split}_error_95_snr"] = rows[1]["error_by_snr"]
        scores[f"{split}_error_95_abs_mu"] = rows[1]["error_by_abs_mu"]
    (Path(run_dir) / "screen.json").write_text(json.dumps(scores, indent=1) + "\n")
    print(json.dumps(scores))


if __name__ == "__main__":
    main(sys.argv[1])
