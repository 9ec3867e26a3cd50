#!/usr/bin/env bash
# Download, for each SESSION, its results from the last scheduled nightly of the default branch that
# finished with results for it (previous_nightly.sh), into DEST/results-SESSION/. A session without
# such a run is left out and said so. Used for the records a session reuses and for the baseline.
#
#   .github/scripts/download_previous.sh DEST SESSION...
#
# Needs gh with GH_TOKEN (actions: read), GH_REPO and DEFAULT_BRANCH.
set -euo pipefail
if [ "$#" -lt 2 ]; then
  echo "usage: $0 DEST SESSION..." >&2
  exit 2
fi
dest=$1
shift
here=$(dirname "${BASH_SOURCE[0]}")
for session in "$@"; do
  run=$(bash "$here/previous_nightly.sh" "$session" | sed -n 's/^run=//p')
  if [ -z "$run" ]; then
    echo "$session: no earlier scheduled nightly with its results"
  elif gh run download "$run" -n "results-$session" -D "$dest/results-$session"; then
    echo "$session: results of run $run"
  else
    echo "$session: the results of run $run could not be downloaded"
    rm -rf "${dest:?}/results-$session"
  fi
done
