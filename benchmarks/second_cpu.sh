#!/usr/bin/env bash
# The CPU-family benchmarks (issue 44, item 5) in one script of a few minutes: the CPU,
# the peers' workload against its measured floor (two cores, as the 2-core machines
# have) and the small networks (one thread), each for every tree given, alternating.
#   bash benchmarks/second_cpu.sh main=. base=/path/to/old/tree
# Each argument is LABEL=DIR, DIR holding the bbb_gluon package to time; the scripts
# are this tree's. PYTHON picks the interpreter (default python3), BENCH_ARGS adds
# arguments to every benchmark (--tiny to try the script).
set -euo pipefail
PYTHON=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
two="taskset -c 0,1"
$two true 2>/dev/null || two=""  # no taskset (or one core): the machine's own count
echo "## $(date -u +%FT%TZ)  $PYTHON $($PYTHON -c 'import sys; print(sys.version.split()[0])')"
PYTHONPATH=${1#*=}${PYTHONPATH:+:$PYTHONPATH} $PYTHON "$here/cpu.py"
for bench in "bench_floor.py" "bench_small_step.py"; do
  for tree in "$@"; do
    label=${tree%%=*}; dir=${tree#*=}
    echo "## $label: ${two:+$two }python benchmarks/$bench"
    PYTHONPATH=$dir${PYTHONPATH:+:$PYTHONPATH} $two $PYTHON "$here/$bench" ${BENCH_ARGS:-}
  done
done
