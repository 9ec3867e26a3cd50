#!/usr/bin/env bash
# The report page is checked in a real headless browser (tests/test_report_page.py): chromium and its
# chromedriver on PATH. A hosted ubuntu image has both (/usr/bin); elsewhere apt installs Debian's
# packages, through sudo where this is not root. Used by ci.yml's tests job and by .ci/run.
set -euo pipefail
if { command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then
  exit 0
fi
as_root=()
if [ "$(id -u)" != 0 ]; then as_root=(sudo); fi
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
