"""Kill-and-resume under a changing machine load: does a resumed run end with the history
of a run never interrupted?

Two uninterrupted runs (one started on an idle machine, one beside a busy loop on one
core: they claim 2 and 1 threads, and differ in the last bits), then ``--kills`` runs of
the same command, each killed with SIGKILL 0-6 s after its first epoch ended (in its
second or third: an epoch of MNIST takes seconds on 2 cores) and resumed with
``--resume``; the busy loop (other work on the machine) is started or stopped between the
kill and the resume, so that the resume sees another number of idle cores than the start.
Prints, per kill, whether the final history equals that of the uninterrupted run started
with the same threads (every column but the timings) and the thread counts config.json
records.

    python experiments/kill_resume_sweep.py --out /tmp/sweep --kills 12
"""

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time

COMMAND = ["train", "--dataset", "mnist", "--model", "bbb", "--epochs", "3", "--seed", "7",
           "--no-progress"]


def _burn():
    while True:
        pass


def _history(folder):
    with open(os.path.join(folder, "history.json")) as f:
        rows = json.load(f)
    return [{k: v for k, v in row.items() if "seconds" not in k} for row in rows]


def _threads(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return [m.get("threads") for m in json.load(f)["machines"]]


def _train(argv, out):
    return subprocess.Popen([sys.executable, "-m", "bbb_gluon", *argv, "--out", out],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="a folder for the runs")
    p.add_argument("--kills", type=int, default=12)
    p.add_argument("--subset", type=int, default=None,
                   help="train on this many MNIST images (default all)")
    args = p.parse_args()
    if args.subset:
        COMMAND.extend(["--subset", str(args.subset)])
    os.makedirs(args.out, exist_ok=True)
    want = {}
    for busy in (False, True):
        burner = multiprocessing.Process(target=_burn, daemon=True) if busy else None
        if burner is not None:
            burner.start()
        reference = os.path.join(args.out, "uninterrupted" + ("-busy" if busy else ""))
        _train(COMMAND, reference).communicate()
        if burner is not None:
            burner.terminate()
        threads = _threads(reference)
        want[threads[0]["train"]] = _history(reference)
        print(f"uninterrupted{' (busy)' if busy else ''}: threads {threads}", flush=True)
    burner, same = None, 0
    for k in range(args.kills):
        delay = 6.0 * k / max(1, args.kills - 1)
        if k % 2:  # every other run starts with the machine busy
            burner = multiprocessing.Process(target=_burn, daemon=True)
            burner.start()
        folder = os.path.join(args.out, f"kill{k:02d}")
        run = _train(COMMAND, folder)
        for line in run.stdout:
            if line.startswith("epoch 1/3"):
                break
        time.sleep(delay)
        run.kill()
        run.wait()
        if burner is not None:  # the load changes between the kill and the resume
            burner.terminate()
            burner = None
        else:
            burner = multiprocessing.Process(target=_burn, daemon=True)
            burner.start()
        resumed = _train(["train", "--resume", "--no-progress"], folder)
        _, err = resumed.communicate()
        if burner is not None:
            burner.terminate()
            burner = None
        got = _history(folder)
        equal = got == want.get(_threads(folder)[0]["train"])
        same += equal
        notes = [line for line in err.splitlines() if line.startswith("bbb_gluon:")]
        print(f"kill {k + 1:2d} at {delay:.1f} s after epoch 1: history "
              f"{'identical' if equal else 'DIFFERS'}; threads {_threads(folder)}"
              + (f"; {notes}" if notes else ""), flush=True)
    print(f"{same} of {args.kills} resumed runs identical to the uninterrupted one")
    return 0 if same == args.kills else 1


if __name__ == "__main__":
    sys.exit(main())
