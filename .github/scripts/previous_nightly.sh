#!/usr/bin/env bash
# Print `run=ID` of the newest finished nightly run (other than $THIS_RUN) that produced results
# (a results-* artifact), whatever its conclusion; `run=` when there is none. The nightly's
# baseline and the records its sessions may reuse come from that run.
#
# Needs gh with GH_TOKEN (actions: read) and GH_REPO.
set -euo pipefail
ids=$(gh run list --workflow nightly.yml --status completed --limit 30 --json databaseId \
        --jq '.[].databaseId') || ids=""
for id in $ids; do
  [ "$id" = "${THIS_RUN:-}" ] && continue
  # Read the whole list first: `grep -q` ends at the first match and, under pipefail, the writer's
  # SIGPIPE would make a run with results look like one without.
  names=$(gh api "repos/${GH_REPO}/actions/runs/${id}/artifacts" --jq '.artifacts[].name' 2>/dev/null) || names=""
  if grep -q '^results-' <<< "$names"; then
    echo "run=$id"
    echo "previous nightly with results: run $id" >&2
    exit 0
  fi
done
echo "run="
echo "no earlier finished nightly with results" >&2
