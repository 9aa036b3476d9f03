#!/usr/bin/env bash
# The paper-recipe runs of docs/RESULTS.md ("The paper's own recipe"), resumable.
#
# They run from a git worktree pinned at the commit that started them, so later changes
# on main never change a running experiment:
#   git worktree add ../exp-paper 3d7a620 && (cd ../exp-paper && make setup)
#   mkdir -p ../exp-paper/.data && ln -s "$(cd ../shared/data/mnist && pwd)" ../exp-paper/.data/mnist
#   cd ../exp-paper && setsid nohup bash ../main/experiments/paper_recipe.sh 1200 &
#   cd ../exp-paper && setsid nohup bash ../main/experiments/paper_recipe.sh 400 &
#   cd ../exp-paper && setsid nohup bash ../main/experiments/paper_recipe.sh levers1 &
# The later levers need --rho-lr-mult and the stored --test-samples, so they run from a
# second worktree at 2c2b5b9 (made the same way, ../exp-levers):
#   cd ../exp-levers && setsid nohup bash ../main/experiments/paper_recipe.sh spike &
#   cd ../exp-levers && setsid nohup bash ../main/experiments/paper_recipe.sh levers2 &
#   cd ../exp-levers && setsid nohup bash ../main/experiments/paper_recipe.sh spike1200 &
#   cd ../exp-levers && setsid nohup bash ../main/experiments/paper_recipe.sh combo &
#   cd ../exp-levers && setsid nohup bash ../main/experiments/paper_recipe.sh combo1200 &
#   cd ../exp-levers && setsid nohup bash ../main/experiments/paper_recipe.sh sigma1200 &
#   cd ../exp-levers && setsid nohup bash ../main/experiments/paper_recipe.sh adamlate &
# The grid's finalists (final-a, final-b) run from ../exp-grid (pinned at ef1f82b, made as
# experiments/screen.sh says), with this script as committed:
#   cd ../exp-grid && setsid nohup bash -c "bash <(git -C ../main show COMMIT:experiments/paper_recipe.sh) final-a" &
# Each queue runs its commands one after another, one thread each (two queues fill the
# two cores); a run with a checkpoint is resumed, a finished one (metrics.json) skipped.
# Logs: runs/NAME.log. Copy config.json, history.csv, metrics.json and the plots (never
# checkpoints) to results/ as they progress.
set -u
export BBB_GLUON_DATA="${BBB_GLUON_DATA:-$PWD/.data}" OMP_NUM_THREADS=1
mkdir -p runs

run() {  # run NAME ARGS...
  local name=$1; shift
  local out=runs/$name
  [ -f "$out/metrics.json" ] && return 0
  if [ -f "$out/checkpoints/latest.params" ]; then
    .venv/bin/bbb-gluon train --out "$out" --resume --no-progress >> "runs/$name.log" 2>&1
  else
    .venv/bin/bbb-gluon train "$@" --out "$out" --no-progress >> "runs/$name.log" 2>&1
  fi
}

case "${1:-}" in
  1200)
    run recipe-1200 --recipe paper --hidden 1200,1200 ;;
  400)
    run recipe-400 --recipe paper --hidden 400,400
    run recipe-400-seed1 --recipe paper --hidden 400,400 --seed 1
    run recipe-plain-400 --recipe paper --model plain --hidden 400,400
    run recipe-dropout-400 --recipe paper --model dropout --hidden 400,400
    run recipe-gaussian-400 --recipe paper --prior gaussian --prior-sigma 1 --hidden 400,400 ;;
  levers1)  # the levers, at 400 units, one change each from the recipe
    run lever-rho-wide-400 --recipe paper --hidden 400,400 --rho-init=-2.5,-2 ;;
  levers2)  # from a worktree at 2c2b5b9 or later (--rho-lr-mult): ../exp-levers
    run lever-rho-lr10-400 --recipe paper --hidden 400,400 --rho-lr-mult 10
    run lever-sigma1-e1-400 --recipe paper --hidden 400,400 --log-sigma1 -1
    run lever-lr1e-4-400 --recipe paper --hidden 400,400 --lr 1e-4 --lr-decay-epochs= ;;
  spike)  # the narrow component's width, which the Gaussian-prior run points at (RESULTS.md)
    run lever-sigma2-e6-400 --recipe paper --hidden 400,400 --log-sigma2 -6 ;;
  combo)  # the two levers that helped, together: sigma1's accuracy, sigma2's pruning
    run lever-s1e1-s2e6-400 --recipe paper --hidden 400,400 --log-sigma1 -1 --log-sigma2 -6 ;;
  combo1200)  # the same at the paper's width, for both tables (about 4 h on one thread)
    run lever-s1e1-s2e6-1200 --recipe paper --hidden 1200,1200 --log-sigma1 -1 --log-sigma2 -6 ;;
  sigma1200)  # sigma1 = e^-1 alone at the paper's width, for the 1.32% target
    run lever-sigma1-e1-1200 --recipe paper --hidden 1200,1200 --log-sigma1 -1 ;;
  spike1200)  # the same at the paper's width, for Table 2 (about 4 h on one thread)
    run lever-sigma2-e6-1200 --recipe paper --hidden 1200,1200 --log-sigma2 -6 ;;
  adamlate)  # results/mnist-bbb-mixture-400's Adam run again, for its end-of-training weights
    run adam-mixture-400-late --dataset mnist --model bbb --hidden 400,400 --prior scale_mixture \
      --pi 0.5 --log-sigma1 0 --log-sigma2 -6 --weighting blundell --rho-init -5 --lr 1e-3 \
      --epochs 600 --eval-samples 0 --test-samples 10 ;;
  final-a)  # the paper's grid, screened at 2x400 (screen.sh): the runner-up of the e^-6 cells
    # by max(validation error, the same with 95% removed), after the pair already run here
    run final-pi0.5-s1e1-s2e6-1200 --recipe paper --hidden 1200,1200 --pi 0.5 \
      --log-sigma1=-1 --log-sigma2=-6 ;;
  final-b)  # the best cell of the middle spike, sigma2 = e^-7, by the same score
    run final-pi0.5-s1e2-s2e7-1200 --recipe paper --hidden 1200,1200 --pi 0.5 \
      --log-sigma1=-2 --log-sigma2=-7 ;;
  final-c)  # the middle spike with the recipe's sigma1 = 1: final-b's setting but sigma1,
    # after final-b (e^-7) pruned flat at 2x1200 where the screen said it would not
    run final-pi0.5-s1e0-s2e7-1200 --recipe paper --hidden 1200,1200 --pi 0.5 \
      --log-sigma1=0 --log-sigma2=-7 ;;
  *)
    echo "usage: paper_recipe.sh 1200|400|levers1|levers2|spike|spike1200|combo|combo1200|sigma1200|adamlate|final-a|final-b|final-c (from the pinned worktree)" >&2; exit 2 ;;
esac
