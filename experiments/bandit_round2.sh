#!/usr/bin/env bash
# Runs the named probes of experiments/bandit_round2.txt side by side (all of them when none
# is named) into runs/probes/NAME, each on its own threads; waits for every one.
#   BBB_GLUON_DATA=... bash experiments/bandit_round2.sh [NAME ...]
# BANDIT: the command to run (default: bbb-gluon; experiments/bandit_without_mxnet.py where
# MXNet cannot be installed). STEPS: steps per probe (10000).
set -u
here=$(cd "$(dirname "$0")" && pwd)
bandit=${BANDIT:-bbb-gluon}
mkdir -p runs/probes
pids=()
while read -r name threads options; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    if (( $# )) && [[ ! " $* " == *" $name "* ]]; then continue; fi
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=$threads $bandit bandit --out "runs/probes/$name" --steps "${STEPS:-10000}" \
        --threads "$threads" --no-progress --force $options > "runs/probes/$name.log" 2>&1 &
    pids+=($!)
done < "$here/bandit_round2.txt"
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
