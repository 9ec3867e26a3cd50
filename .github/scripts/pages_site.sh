#!/usr/bin/env bash
# The report as a static site for GitHub Pages: the site mirrors the checkout where the report links
# into it, so that every link of report.html holds there as in the checkout.
#
#   .github/scripts/pages_site.sh REPORT_DIR SITE_DIR
#
# REPORT_DIR is the report the nightly wrote (report/: REPORT.md, report.html, report-cells/,
# report.json), a folder of the checkout; SITE_DIR, which must not exist, gets it at the same path,
# the findings' scripts, issue texts and fixes (results/reductions/, which the cards link) and an
# index.html at its root that opens the report.
set -euo pipefail

if [ "$#" -ne 2 ]; then
  echo "usage: $0 REPORT_DIR SITE_DIR" >&2
  exit 2
fi
report=$1 site=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ ! -f "$report/report.html" ]; then
  echo "error: no report.html in $report" >&2
  exit 2
fi
if [ -e "$site" ]; then
  echo "error: $site exists; the site is built afresh" >&2
  exit 2
fi
where=$(realpath --relative-to="$root" "$report")
case "$where" in
  ../*|/*) echo "error: $report is not a folder of the checkout $root (its links lead into the checkout)" >&2; exit 2 ;;
esac
mkdir -p "$site/$where" "$site/results"
cp -R "$report/." "$site/$where/"
cp -R "$root/results/reductions" "$site/results/reductions"
cat > "$site/index.html" <<HTML
<!doctype html>
<meta charset="utf-8">
<title>torch.compile compatibility report</title>
<meta http-equiv="refresh" content="0; url=$where/report.html">
<p><a href="$where/report.html">The torch.compile compatibility report</a></p>
HTML
find "$site" -type f | wc -l | xargs echo "site: $site, files:"
