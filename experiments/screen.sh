#!/usr/bin/env bash
# Screening of the paper's prior grid at 2x400 (docs/RESULTS.md, "Screening the prior grid").
#
# The screening schedule: the paper recipe (plain SGD, lr 1e-3 on the summed cost) for 50
# epochs with the decay after epoch 25, on 50,000 images with a 10,000-image validation
# split. Each run is then scored on the validation split by its end-of-training error with
# the means, unpruned and with 95% of the weights removed by |mu|/sigma (screen_score.py).
#
# Runs come from a git worktree pinned at one commit, so later changes on main never change
# a running experiment:
#   git worktree add ../exp-grid ef1f82b && (cd ../exp-grid && make setup data)
#   cd ../exp-grid && setsid nohup bash -c 'bash experiments/screen.sh check;
#     bash experiments/screen.sh grid-b' > /dev/null 2>&1 &
#   cd ../exp-grid && setsid nohup bash experiments/screen.sh grid-a > /dev/null 2>&1 &
# (the worktree's own copy of this script, so that it is pinned too), then
#   python experiments/screen_table.py ../exp-grid/runs/screen results/screen-grid
# Queues: check (the committed 600-epoch settings the schedule is checked against, beside
# the four grid cells they share), grid-a and grid-b (the rest of the paper's grid:
# pi in {1/4, 1/2, 3/4}, -log sigma1 in {0, 1, 2}, -log sigma2 in {6, 7, 8}). One thread
# each; a run with a checkpoint resumes, a scored one is skipped.
# Logs: runs/screen/NAME.log; scores: runs/screen/NAME/screen.json.
set -u
export BBB_GLUON_DATA="${BBB_GLUON_DATA:-$PWD/.data}" OMP_NUM_THREADS=1
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p runs/screen
SCREEN=(--recipe paper --hidden 400,400 --num-valid 10000 --epochs 50 --lr-decay-epochs 25
        --test-samples 0)

run() {  # run NAME ARGS...
  local name=$1; shift
  local out=runs/screen/$name
  [ -f "$out/screen.json" ] && return 0
  if [ ! -f "$out/metrics.json" ]; then
    if [ -f "$out/checkpoints/latest.params" ]; then
      .venv/bin/bbb-gluon train --out "$out" --resume --no-progress >> "$out.log" 2>&1 || return 1
    else
      .venv/bin/bbb-gluon train "${SCREEN[@]}" "$@" --out "$out" --no-progress \
        >> "$out.log" 2>&1 || return 1
    fi
  fi
  .venv/bin/python "$here/screen_score.py" "$out" >> "$out.log" 2>&1
}

cell() {  # cell PI NEG_LOG_SIGMA1 NEG_LOG_SIGMA2
  run "pi$1-s1e$2-s2e$3" --pi "$1" --log-sigma1="-$2" --log-sigma2="-$3"
}

case "${1:-}" in
  check)
    cell 0.75 0 8   # the recipe
    cell 0.75 1 8   # sigma1 = e^-1
    cell 0.75 0 6   # sigma2 = e^-6
    cell 0.75 1 6   # the pair
    run recipe-seed1 --seed 1
    run lr1e-4 --lr 1e-4 --lr-decay-epochs=
    run rho-lr10 --rho-lr-mult 10
    run rho-wide --rho-init=-2.5,-2
    run gaussian --prior gaussian --prior-sigma 1 ;;
  grid-a)  # sigma2 = e^-7 first: the untried middle between the two regimes
    for pi in 0.75 0.5 0.25; do for s1 in 0 1 2; do cell $pi $s1 7; done; done
    cell 0.75 2 6; cell 0.75 2 8
    for s1 in 0 1 2; do cell 0.5 $s1 6; cell 0.5 $s1 8; done ;;
  grid-b)  # after check, on the same core
    for s1 in 0 1 2; do cell 0.25 $s1 6; cell 0.25 $s1 8; done ;;
  *)
    echo "usage: screen.sh check|grid-a|grid-b (from the pinned worktree)" >&2; exit 2 ;;
esac
