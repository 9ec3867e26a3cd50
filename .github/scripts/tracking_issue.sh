#!/usr/bin/env bash
# Open, or update, the one open issue labelled nightly-regression with the regressions found.
#
#   .github/scripts/tracking_issue.sh REGRESSIONS_MD
#
# Needs gh with GH_TOKEN (issues: write) and GH_REPO; RUN_URL names the nightly run.
set -euo pipefail
section=$1
label=nightly-regression
run=${RUN_URL:-this run}

body=$(mktemp)
{
  echo "The nightly torch.compile matrix found cells worse than the committed table (results/). They stay here, night after night, until the cause is fixed or the new outcome is committed to the table."
  echo
  echo "Latest: ${run} (the full report is its \`report\` artifact)."
  echo
  cat "$section"
} > "$body"

number=$(gh issue list --label "$label" --state open --limit 1 --json number --jq '.[0].number // empty')
if [ -z "$number" ]; then
  gh label create "$label" --color B60205 --description "Found by the nightly matrix" --force >/dev/null
  gh issue create --title "Nightly matrix: torch.compile regressions" --label "$label" --body-file "$body"
else
  gh issue edit "$number" --body-file "$body" >/dev/null
  gh issue comment "$number" --body "Regressions again in ${run}; the description now lists them."
  echo "updated issue #$number"
fi
