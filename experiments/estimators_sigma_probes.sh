#!/usr/bin/env bash
# Issue 36: does sigma still run to N(0, 1)'s under the local reparameterisation with plain SGD
# (the paper's recipe) or with rho's learning rate at a tenth of mu's (Adam)? MNIST 2x400,
# 20 epochs, seed 0, one thread, into runs/sigma/NAME (results/estimators-sigma-probes/).
# Run from a worktree with its own .venv and data:  bash experiments/estimators_sigma_probes.sh
set -u
mkdir -p runs/sigma
export BBB_GLUON_DATA=$PWD/.data OMP_NUM_THREADS=1
common="--dataset mnist --hidden 400,400 --epochs 20 --prior gaussian --prior-sigma 1 --seed 0 --eval-samples 0 --monitor-test --test-samples 10 --no-progress"
for spec in "local-gaussian-sgdpaper-s0|--estimator local --recipe paper" "local-gaussian-rholr0.1-s0|--estimator local --rho-lr-mult 0.1" "reparam-gaussian-sgdpaper-s0|--estimator reparam --recipe paper"; do
  name=${spec%%|*}; opts=${spec#*|}
  [[ -f runs/sigma/$name/metrics.json ]] && continue
  start=$(date +%s)
  .venv/bin/bbb-gluon train $opts $common --out runs/sigma/$name > runs/sigma/$name.log 2>&1
  echo "$name: exit $? after $(( $(date +%s) - start )) s ($(date -u +%H:%M:%S))"
done
