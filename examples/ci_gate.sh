#!/bin/sh
# advisor as a CI gate: the pull request's audit against the baseline kept from main, by `advisor diff`.
#
#   examples/ci_gate.sh BASELINE_MODEL_FILE PR_MODEL_FILE OUT_DIR
#
# In CI, BASELINE_MODEL_FILE is the model file in a checkout of main (or keep main's report from its last run
# and skip the first audit), PR_MODEL_FILE the same file in the pull request's checkout. Exit codes:
#   0  no regression: the step time is within its threshold or within the noise of the two runs, and no
#      readiness check got worse (a run on a contended machine is not judged on time: the diff says so)
#   1  a regression: the step (or a latency percentile) slower beyond --threshold with its whole 95% interval,
#      run-to-run noise included, past it; a readiness check that got worse; or a HIGH finding the PR added
#      (--fail-on high: one in a run only and decided within its noise is borderline, not added)
#   2  advisor could not audit a file or read a report (the message names which and why)
set -u
baseline=$1 pr=$2 out=$3
for side in baseline pr; do
    eval file=\$$side
    # an audit exits 1 on a finding at or above --fail-on: findings are the diff's to judge, not this step's
    advisor audit "$file" --no-verify --format json --out "$out/$side" --quiet
    [ $? -le 1 ] || exit 2
done
old=$(ls "$out"/baseline/*.json) new=$(ls "$out"/pr/*.json)
advisor diff "$old" "$new" --fail-on high --html "$out/diff.html"
