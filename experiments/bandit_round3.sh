#!/usr/bin/env bash
# Runs the named probes of experiments/bandit_round3.txt one after the other (all of them
# when none is named), each on one thread, into ${RUNS:-runs/probes3}/NAME; a probe whose
# folder already has metrics.json is skipped.
#   BBB_GLUON_DATA=... bash experiments/bandit_round3.sh [NAME ...]
# BANDIT: the command (default bbb-gluon); STEPS: steps per probe (10000).
set -u
here=$(cd "$(dirname "$0")" && pwd)
bandit=${BANDIT:-bbb-gluon}
runs=${RUNS:-runs/probes3}
mkdir -p "$runs"
status=0
while read -r name options; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    if (( $# )) && [[ ! " $* " == *" $name "* ]]; then continue; fi
    [[ -f "$runs/$name/metrics.json" ]] && continue
    start=$(date +%s)
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 $bandit bandit --out "$runs/$name" --steps "${STEPS:-10000}" \
        --threads 1 --no-progress --force $options > "$runs/$name.log" 2>&1 || status=1
    echo "$name: exit $? after $(( $(date +%s) - start )) s ($(date -u +%H:%M:%S))"
done < "$here/bandit_round3.txt"
exit $status
