#!/bin/bash
# Grade a class on SLURM: N array tasks (one shard each), then the merge once they have all ended.
#   SUBMISSIONS=/shared/ch01.zip CHAPTER=01_rooflines ROSTER=/shared/roster.csv autograder/deploy/slurm/submit.sh 8
set -euo pipefail
N=${1:?usage: submit.sh NUMBER_OF_SHARDS}
here=$(cd "$(dirname "$0")" && pwd)
export REPO=${REPO:-$(cd "$here/../../.." && pwd)}
grade=$(sbatch --parsable --export=ALL --array=0-$((N - 1)) "$here/grade.sbatch")
sbatch --export=ALL --dependency=afterany:"$grade" "$here/merge.sbatch"
echo "grading job $grade ($N shards); the merge runs when they have all ended"
