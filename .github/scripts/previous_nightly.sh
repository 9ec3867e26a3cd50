#!/usr/bin/env bash
# Print `run=ID` of the last *scheduled* nightly of the *default branch* (other than $THIS_RUN) that
# finished with results for SESSION (its results-SESSION artifact; without SESSION, any results-*
# artifact), whatever its conclusion; `run=` when there is none. That run is SESSION's baseline and
# the source of the records it may reuse. A workflow_dispatch run (perhaps narrowed by a tag) or a
# run of another branch is never chosen.
#
#   .github/scripts/previous_nightly.sh [SESSION]
#
# Needs gh with GH_TOKEN (actions: read), GH_REPO and DEFAULT_BRANCH.
set -euo pipefail
session=${1:-}
want=${session:+results-$session}
branch=${DEFAULT_BRANCH:?DEFAULT_BRANCH is not set}
ids=$(gh run list --workflow nightly.yml --event schedule --branch "$branch" --status completed --limit 30 \
        --json databaseId --jq '.[].databaseId') || ids=""
for id in $ids; do
  [ "$id" = "${THIS_RUN:-}" ] && continue
  # Read the whole list first: `grep -q` ends at the first match and, under pipefail, the writer's
  # SIGPIPE would make a run with results look like one without. Expired artifacts cannot be downloaded.
  names=$(gh api "repos/${GH_REPO}/actions/runs/${id}/artifacts" --paginate \
            --jq '.artifacts[] | select(.expired | not) | .name' 2>/dev/null) || names=""
  if { [ -n "$want" ] && grep -qx -- "$want" <<< "$names"; } || { [ -z "$want" ] && grep -q '^results-' <<< "$names"; }; then
    echo "run=$id"
    echo "last scheduled nightly of $branch with ${want:-results}: run $id" >&2
    exit 0
  fi
done
echo "run="
echo "no earlier scheduled nightly of $branch finished with ${want:-results}" >&2
