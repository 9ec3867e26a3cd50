"""Stand-in for actions/cache/restore and actions/cache/save under act: the same inputs and outputs,
on act's own cache server ($ACTIONS_CACHE_URL, the `_apis/artifactcache` REST API: find, reserve,
upload, commit). The archive is a gzipped tar of the `path` input, as the real action's is (zstd there).

    python3 cache.py restore   (INPUT_PATH, INPUT_KEY, INPUT_RESTORE_KEYS)
    python3 cache.py save      (INPUT_PATH, INPUT_KEY)
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request


CHUNK = 32 * 2**20  # the toolkit's upload chunk
LIMIT = 10 * 2**30  # GitHub's cache size limit: the real action saves nothing above it


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
    with tempfile.TemporaryFile() as archive:  # a cache can be GBs: on disk, never whole in memory
        with urllib.request.urlopen(found["archiveLocation"], timeout=600) as response:
            shutil.copyfileobj(response, archive, CHUNK)
        archive.seek(0)
        tarfile.open(fileobj=archive, mode="r:gz").extractall("/", filter="tar")
    print(f"Cache restored from key: {found['cacheKey']}")
    output(**{"cache-hit": str(found["cacheKey"] == key.lower()).lower(), "cache-primary-key": key,
              "cache-matched-key": found["cacheKey"]})
    return 0


def save() -> int:
    with tempfile.TemporaryFile() as archive:  # streamed, in the chunks the real action uploads
        # gzip's fastest level: the real action's zstd is fast too, and a runner's disk, not its CPU, is the point
        with tarfile.open(fileobj=archive, mode="w:gz", compresslevel=1) as tar:
            for path in paths():
                if path.exists():
                    tar.add(path, arcname=str(path.resolve()).lstrip("/"))
        size = archive.tell()
        if size > LIMIT:  # what the real action does: a warning, and nothing saved
            print(f"::warning::Cache size of ~{size // 2**20} MB ({size} B) is over the 10GB limit, not saving cache.")
            return 0
        _, reserved = api("POST", "caches", json.dumps({"key": os.environ["INPUT_KEY"], "version": version(),
                                                        "cacheSize": size}).encode())
        cache = reserved["cacheId"]
        archive.seek(0)
        for start in range(0, size, CHUNK):
            data = archive.read(CHUNK)
            api("PATCH", f"caches/{cache}", data, {"Content-Type": "application/octet-stream",
                                                   "Content-Range": f"bytes {start}-{start + len(data) - 1}/*"})
        api("POST", f"caches/{cache}", json.dumps({"size": size}).encode())
    print(f"Cache saved with key: {os.environ['INPUT_KEY']} ({size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit({"restore": restore, "save": save}[sys.argv[1]]())
