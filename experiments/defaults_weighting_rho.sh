#!/usr/bin/env bash
# Issue 35's defaults from evidence: the complexity weighting and rho's starting value on
# 2x400 MNIST and Fashion-MNIST, 20 epochs, every other setting the package's default
# (Adam 1e-3, batch 128, the scale mixture pi 0.5, sigma1 1, sigma2 e^-6), seeds 0-1, one
# thread, one run after another, into ${RUNS:-runs/defaults}/DATASET-WEIGHTING-rhoR-sSEED;
# a finished run (metrics.json) is skipped.
#   BBB_GLUON_DATA=... bash experiments/defaults_weighting_rho.sh
set -u
bbb=${BBB:-bbb-gluon}
runs=${RUNS:-runs/defaults}
mkdir -p "$runs"
status=0
for seed in 0 1; do
  for dataset in mnist fashion-mnist; do
    for setting in uniform:-3 blundell:-5 uniform:-5; do
      weighting=${setting%%:*} rho=${setting##*:}
      name=$dataset-$weighting-rho$rho-s$seed
      [[ -f "$runs/$name/metrics.json" ]] && continue
      rm -rf "${runs:?}/$name"  # an unfinished one starts again
      start=$(date +%s)
      OMP_NUM_THREADS=1 $bbb train --dataset "$dataset" --hidden 400,400 --epochs 20 \
        --weighting "$weighting" --rho-init="$rho" --seed "$seed" --eval-samples 0 \
        --test-samples 10 --no-progress --out "$runs/$name" > "$runs/$name.log" 2>&1
      rc=$?
      (( rc )) && status=1
      echo "$name: exit $rc after $(( $(date +%s) - start )) s ($(date -u +%H:%M:%S))"
    done
  done
done
exit $status
