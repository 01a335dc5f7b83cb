#!/bin/sh
# advisor as a CI gate: the pull request's model file against main's, by findings and by step time.
#
#   examples/ci_gate.sh BASELINE_MODEL_FILE PR_MODEL_FILE OUT_DIR
#
# In CI, BASELINE_MODEL_FILE is the model file in a checkout of main, PR_MODEL_FILE the same file in the pull
# request's checkout. Two judgements:
#   - findings and readiness: each file audited, the two reports diffed (`advisor diff --no-step-time`): a HIGH
#     finding the PR added fails (one in a run only and decided within its noise is borderline, not added);
#   - step time: the two files timed against each other in interleaved pairs in one process (`advisor diff
#     --remeasure`), so a noisy runner slows both alike. Two separate audits' step times differ by more than a
#     25% larger batch does on a shared 2-core runner; interleaved, identical files agree within a percent.
# Exit codes:
#   0  no regression
#   1  a regression: the step slower beyond the threshold with its whole 95% interval past it, a readiness
#      check that got worse, or a HIGH finding the PR added
#   2  advisor could not audit a file or read a report (the message names which and why)
# Written to OUT_DIR: each side's JSON report (the pull request's SARIF beside it, for code scanning), diff.html,
# and comment.md (the findings' diff and the interleaved step time in Markdown, for the pull request's comment).
# ADVISOR_GATE_PAIRS sets how many interleaved pairs time the step (default 20: the same work on any runner).
set -u
baseline=$1 pr=$2 out=$3
for side in baseline pr; do
    eval file=\$$side
    if [ $side = pr ]; then formats=json,sarif; else formats=json; fi
    # an audit exits 1 on a finding at or above --fail-on: findings are the diff's to judge, not this step's
    advisor audit "$file" --no-verify --format $formats --out "$out/$side" --quiet
    [ $? -le 1 ] || exit 2
done
old=$(ls "$out"/baseline/*.json) new=$(ls "$out"/pr/*.json)
advisor diff "$old" "$new" --no-step-time --fail-on high --html "$out/diff.html" --markdown "$out/comment.md"
findings=$?
advisor diff --remeasure "$baseline" "$pr" --pairs "${ADVISOR_GATE_PAIRS:-20}" > "$out/step.txt"
timed=$?
cat "$out/step.txt"
if [ -f "$out/comment.md" ]; then
    { printf '\n### Step time, the two revisions timed against each other\n\n```\n'; cat "$out/step.txt"
      printf '```\n'; } >> "$out/comment.md"
fi
if [ $findings -ge 2 ] || [ $timed -ge 2 ]; then exit 2; fi
if [ $findings -eq 1 ] || [ $timed -eq 1 ]; then exit 1; fi
exit 0
