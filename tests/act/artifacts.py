"""Stand-in for actions/upload-artifact and actions/download-artifact under act: the same inputs,
spoken to act's own artifact server in the v4 protocol the real actions use (twirp JSON at
$ACTIONS_RESULTS_URL, the run's ids in $ACTIONS_RUNTIME_TOKEN's `scp` claim, the zip uploaded to
the signed URL the server hands out).

    python3 artifacts.py upload     (INPUT_NAME, INPUT_PATH, INPUT_IF_NO_FILES_FOUND, INPUT_OVERWRITE)
    python3 artifacts.py download   (INPUT_NAME or INPUT_PATTERN, INPUT_PATH)
"""

from __future__ import annotations

import base64
import fnmatch
import glob
import hashlib
import io
import json
import os
import pathlib
import sys
import urllib.request
import zipfile

SERVICE = "twirp/github.actions.results.api.v1.ArtifactService"


def backend_ids() -> tuple[str, str]:
    payload = os.environ["ACTIONS_RUNTIME_TOKEN"].split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    _, run, job = next(s for s in claims["scp"].split() if s.startswith("Actions.Results:")).split(":")
    return run, job


def call(method: str, body: dict) -> dict:
    url = os.environ["ACTIONS_RESULTS_URL"].rstrip("/") + f"/{SERVICE}/{method}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def files_of(patterns: list[str]) -> tuple[list[pathlib.Path], pathlib.Path]:
    """The files the `path` input names, and their common root (as upload-artifact lays out a zip)."""
    found = sorted({pathlib.Path(f).resolve() for p in patterns for f in glob.glob(p, recursive=True)
                    if pathlib.Path(f).is_file()} | {f.resolve() for p in patterns if pathlib.Path(p).is_dir()
                                                       for f in pathlib.Path(p).rglob("*") if f.is_file()})
    roots = [pathlib.Path(p).resolve() if pathlib.Path(p).is_dir() else pathlib.Path(p).resolve().parent
             for p in patterns if not any(c in p for c in "*?[")] or [f.parent for f in found]
    root = pathlib.Path(os.path.commonpath([str(r) for r in roots])) if roots else pathlib.Path.cwd()
    return found, root


def upload() -> int:
    name = os.environ["INPUT_NAME"] or "artifact"
    patterns = [line.strip() for line in os.environ.get("INPUT_PATH", "").splitlines() if line.strip()]
    found, root = files_of(patterns)
    if not found:
        how = os.environ.get("INPUT_IF_NO_FILES_FOUND") or "warn"
        message = f"No files were found with the provided path: {' '.join(patterns)}. No artifacts will be uploaded."
        if how == "error":
            print(f"::error::{message}")
            return 1
        if how == "warn":
            print(f"::warning::{message}")
        return 0
    run, job = backend_ids()
    if os.environ.get("INPUT_OVERWRITE") == "true":
        try:
            call("DeleteArtifact", {"workflow_run_backend_id": run, "workflow_job_run_backend_id": job, "name": name})
        except OSError:
            pass  # nothing of that name yet
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in found:
            archive.write(path, path.relative_to(root).as_posix())
    data = buffer.getvalue()
    created = call("CreateArtifact", {"workflow_run_backend_id": run, "workflow_job_run_backend_id": job,
                                      "name": name, "version": 4})
    put = urllib.request.Request(created["signedUploadUrl"] + "&comp=block", data=data, method="PUT")
    urllib.request.urlopen(put, timeout=60).close()
    final = call("FinalizeArtifact", {"workflow_run_backend_id": run, "workflow_job_run_backend_id": job, "name": name,
                                      "size": str(len(data)), "hash": "sha256:" + hashlib.sha256(data).hexdigest()})
    print(f"Artifact {name} ({len(found)} files, {len(data)} bytes) uploaded, id {final.get('artifactId')}")
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as handle:
        handle.write(f"artifact-id={final.get('artifactId')}\n")
    return 0


def download() -> int:
    run, job = backend_ids()
    listed = call("ListArtifacts", {"workflow_run_backend_id": run, "workflow_job_run_backend_id": job})
    names = sorted(a["name"] for a in listed.get("artifacts", []))
    name, pattern = os.environ.get("INPUT_NAME", ""), os.environ.get("INPUT_PATTERN", "")
    chosen = [name] if name else [n for n in names if fnmatch.fnmatchcase(n, pattern or "*")]
    if name and name not in names:
        print(f"::error::Artifact not found: {name}")
        return 1
    dest = pathlib.Path(os.environ.get("INPUT_PATH") or ".")
    for artifact in chosen:
        signed = call("GetSignedArtifactURL", {"workflow_run_backend_id": run, "workflow_job_run_backend_id": job,
                                               "name": artifact})["signedUrl"]
        with urllib.request.urlopen(signed, timeout=60) as response:
            data = response.read()
        target = dest if name else dest / artifact  # several: one directory each, as the real action lays them out
        zipfile.ZipFile(io.BytesIO(data)).extractall(target)
        print(f"Artifact {artifact} downloaded to {target}")
    print(f"Total of {len(chosen)} artifact(s) downloaded")
    return 0


if __name__ == "__main__":
    sys.exit({"upload": upload, "download": download}[sys.argv[1]]())
