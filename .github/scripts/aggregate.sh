#!/usr/bin/env bash
# Build the nightly report from downloaded artifacts; runs the same locally on copied inputs.
#
#   .github/scripts/aggregate.sh RESULTS_ROOT TABLE_DIR PREVIOUS_ROOT OUT_DIR [REPORT_ARGS ...]
#
# RESULTS_ROOT and PREVIOUS_ROOT hold results files (*.jsonl) at any depth, e.g. one subdirectory
# per artifact as actions/download-artifact lays them out. TABLE_DIR is the committed table
# (results/ of the checkout): the expectation every run is held to, so a changed cell stays red until
# the change is committed. PREVIOUS_ROOT (the night before) is compared for information only; when
# it could not be fetched, $PREVIOUS_UNAVAILABLE says why, and the report states it and fails.
# $NIGHTS_ROOT, where set, holds earlier nights' results (any depth): read only to learn which cells flip.
# Runs `nox -s report` (nox from PATH) with REPORT_ARGS (e.g. --expect SESSION ...) and writes
# REPORT.md, report.html (with its report-cells/), report.json to OUT_DIR, plus regressions.md (REPORT.md's baseline section)
# when a cell changed for the worse. Exits with the report's status: 0, 1 when the report fails the
# nightly (see its fails: lines), 2 on bad input. With $GITHUB_OUTPUT set, appends regressions=N.
set -euo pipefail

if [ "$#" -lt 4 ]; then
  echo "usage: $0 RESULTS_ROOT TABLE_DIR PREVIOUS_ROOT OUT_DIR [REPORT_ARGS ...]" >&2
  exit 2
fi
results_root=$1 table=$2 previous_root=$3 out=$4
shift 4
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# Every directory that directly holds a results file (results/previous/ copies are not results).
result_dirs() {
  [ -n "$1" ] && [ -d "$1" ] || return 0
  find "$1" -mindepth 1 -name previous -prune -o -type f -name '*.jsonl' -printf '%h\0' | sort -zu |
    while IFS= read -r -d '' dir; do realpath -z -- "$dir"; done
}

mapfile -d '' -t current < <(result_dirs "$results_root")
mapfile -d '' -t previous < <(result_dirs "$previous_root")
mapfile -d '' -t nights < <(result_dirs "${NIGHTS_ROOT:-}")
if [ "${#current[@]}" -eq 0 ]; then
  echo "error: no results files (*.jsonl) under ${results_root}" >&2
  exit 2
fi
if ! compgen -G "${table}/*.jsonl" >/dev/null; then
  echo "error: no committed table (*.jsonl) in ${table}" >&2
  exit 2
fi

args=("${current[@]}" --baseline "$(realpath -- "$table")")
if [ -n "${PREVIOUS_UNAVAILABLE:-}" ]; then
  args+=(--previous-unavailable "$PREVIOUS_UNAVAILABLE")
elif [ "${#previous[@]}" -gt 0 ]; then
  args+=(--previous "${previous[@]}")
  echo "the previous run: ${#previous[@]} director$([ "${#previous[@]}" -eq 1 ] && echo y || echo ies) under ${previous_root}"
else
  # the baseline is the committed table already: no second comparison with it
  args+=(--no-since-committed)
  echo "no earlier scheduled nightly with results: nothing to compare for information"
fi
if [ "${#nights[@]}" -gt 0 ]; then
  # earlier nights: only measurements to learn which cells flip from (git does not hold them)
  args+=(--nights "${nights[@]}")
  echo "earlier nights: ${#nights[@]} director$([ "${#nights[@]}" -eq 1 ] && echo y || echo ies) under ${NIGHTS_ROOT}"
fi
mkdir -p "$out"
out=$(realpath -- "$out")

status=0
nox -f "$root/noxfile.py" -s report -- "${args[@]}" --out "$out" "$@" || status=$?

regressions=0
if [ -f "$out/report.json" ]; then
  regressions=$(python3 - "$out/report.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1], encoding="utf-8"))
print(sum(row["worse"] for row in (data.get("baseline") or {}).get("rows", [])))
PY
)
fi
rm -f "$out/regressions.md"
if [ "$regressions" -gt 0 ]; then
  # The section between "## Against the baseline" and the next "## " heading.
  awk '/^## /{keep = ($0 == "## Against the baseline")} keep' "$out/REPORT.md" > "$out/regressions.md"
fi
if [ -n "${GITHUB_OUTPUT:-}" ]; then
  echo "regressions=$regressions" >> "$GITHUB_OUTPUT"
fi
exit "$status"
