#!/usr/bin/env bash
# Issue 36's accuracy comparison: MNIST 2x400, 20 epochs (the test error after 5 and 20 is
# read from history.csv), each estimator under the default scale mixture and N(0, 1), seeds
# 0-2, one thread, one run after another, into ${RUNS:-runs/estimators}/EST-PRIOR-sSEED;
# a finished run (metrics.json) is skipped. Table: python experiments/estimators_table.py RUNS
#   BBB_GLUON_DATA=... bash experiments/estimators_mnist.sh
set -u
bbb=${BBB:-bbb-gluon}
runs=${RUNS:-runs/estimators}
mkdir -p "$runs"
status=0
for seed in 0 1 2; do
  for prior in mixture gaussian; do
    for est in reparam local flipout; do
      name=$est-$prior-s$seed
      [[ -f "$runs/$name/metrics.json" ]] && continue
      rm -rf "${runs:?}/$name"  # an unfinished one starts again
      opts=(--prior scale_mixture)
      [[ $prior == gaussian ]] && opts=(--prior gaussian --prior-sigma 1)
      start=$(date +%s)
      OMP_NUM_THREADS=1 $bbb train --dataset mnist --hidden 400,400 --epochs 20 \
        --estimator "$est" "${opts[@]}" --seed "$seed" --eval-samples 0 --monitor-test \
        --test-samples 10 --no-progress --out "$runs/$name" > "$runs/$name.log" 2>&1
      rc=$?
      (( rc )) && status=1
      echo "$name: exit $rc after $(( $(date +%s) - start )) s ($(date -u +%H:%M:%S))"
    done
  done
done
exit $status
