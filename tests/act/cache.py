"""Stand-in for actions/cache/restore and actions/cache/save under act: the same inputs and outputs,
on act's own cache server ($ACTIONS_CACHE_URL, the `_apis/artifactcache` REST API: find, reserve,
upload, commit). The archive is a gzipped tar of the `path` input, as the real action's is (zstd there).

    python3 cache.py restore   (INPUT_PATH, INPUT_KEY, INPUT_RESTORE_KEYS)
    python3 cache.py save      (INPUT_PATH, INPUT_KEY)
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import sys
import tarfile
import urllib.parse
import urllib.request


def paths() -> list[pathlib.Path]:
    return [pathlib.Path(os.path.expanduser(p.strip())) for p in os.environ["INPUT_PATH"].splitlines() if p.strip()]


def version() -> str:
    return hashlib.sha256("|".join([*map(str, paths()), "gzip"]).encode()).hexdigest()


def api(method: str, path: str, body: bytes | None = None, headers=None):
    url = os.environ["ACTIONS_CACHE_URL"].rstrip("/") + "/_apis/artifactcache/" + path
    request = urllib.request.Request(url, data=body, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request, timeout=120) as response:
        data = response.read()
        return response.status, (json.loads(data) if data else None)


def output(**values) -> None:
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as handle:
        handle.writelines(f"{key}={value}\n" for key, value in values.items())


def restore() -> int:
    key = os.environ["INPUT_KEY"]
    keys = [key, *(k.strip() for k in os.environ.get("INPUT_RESTORE_KEYS", "").splitlines() if k.strip())]
    status, found = api("GET", "cache?" + urllib.parse.urlencode({"keys": ",".join(keys), "version": version()}))
    if status == 204 or not found:
        print(f"Cache not found for input keys: {', '.join(keys)}")
        output(**{"cache-hit": "false", "cache-primary-key": key, "cache-matched-key": ""})
        return 0
    with urllib.request.urlopen(found["archiveLocation"], timeout=600) as response:
        tarfile.open(fileobj=io.BytesIO(response.read()), mode="r:gz").extractall("/", filter="tar")
    print(f"Cache restored from key: {found['cacheKey']}")
    output(**{"cache-hit": str(found["cacheKey"] == key.lower()).lower(), "cache-primary-key": key,
              "cache-matched-key": found["cacheKey"]})
    return 0


def save() -> int:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in paths():
            if path.exists():
                archive.add(path, arcname=str(path.resolve()).lstrip("/"))
    data = buffer.getvalue()
    _, reserved = api("POST", "caches", json.dumps({"key": os.environ["INPUT_KEY"], "version": version(),
                                                    "cacheSize": len(data)}).encode())
    cache = reserved["cacheId"]
    api("PATCH", f"caches/{cache}", data, {"Content-Type": "application/octet-stream",
                                           "Content-Range": f"bytes 0-{len(data) - 1}/*"})
    api("POST", f"caches/{cache}", json.dumps({"size": len(data)}).encode())
    print(f"Cache saved with key: {os.environ['INPUT_KEY']} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit({"restore": restore, "save": save}[sys.argv[1]]())
