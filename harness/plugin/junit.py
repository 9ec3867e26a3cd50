"""A results file as JUnit XML (`<session>.xml` beside `<session>.jsonl`), what CI dashboards and
test-report actions read: one testcase per case record, in the status JUnit has for its outcome
(harness.core.outcomes), the outcome itself and its matched reference among the testcase's properties, and
the case's `file` and `line` (its test function in cases/) for reporters that annotate the source.
Records are read through harness.core.records (schema 1 and 2)."""

from __future__ import annotations

import pathlib
import re
import xml.etree.ElementTree as ElementTree

from harness.core import caseid, records
from harness.core.outcomes import OUTCOMES

# What XML 1.0 cannot hold, even escaped (ESC, NUL, BEL, ...): ElementTree writes it as it is, and every
# parser then refuses the whole file.
NOT_XML = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text) -> str:
    """`text` with each character XML cannot hold written as its escape (`\x1b`)."""
    return NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def testcase(record: dict) -> ElementTree.Element:
    case = ElementTree.Element("testcase", classname=record["family"], name=caseid.parse(record["case"]).in_family,
                               time=f"{record.get('duration') or 0:.3f}")
    location = record.get("location") or {}  # older records (and carried ones made before) have none
    if location.get("file"):
        case.set("file", location["file"])
        if location.get("line"):
            case.set("line", str(location["line"]))
    properties = ElementTree.SubElement(case, "properties")
    declared = " ".join(dict.fromkeys(d["ref"] for d in record.get("declared") or []))
    values = {"outcome": record["outcome"], "reference": record.get("reference") or "", "declared": declared,
              "nodeid": record.get("nodeid") or "", "reused_from": (record.get("reused_from") or {}).get("started", "")}
    for key, value in values.items():
        if value:
            ElementTree.SubElement(properties, "property", name=key, value=value)
    status = OUTCOMES[record["outcome"]].junit
    message = " ".join(filter(None, [record.get("exc_type"), record.get("message")]))
    if status == "skipped":
        detail = record.get("reference") or ""
        ElementTree.SubElement(case, "skipped", type=record["outcome"],
                               message=f"{record['outcome']}: {detail}: {message}" if detail else message)
    elif status in ("failure", "error"):
        element = ElementTree.SubElement(case, status, type=record["outcome"], message=message)
        element.text = record.get("output_tail") or message
    return case


def render(records: list[dict]) -> str:
    environment = records[0]
    cases = [r for r in records if r["kind"] == "case"]
    statuses = [OUTCOMES[r["outcome"]].junit for r in cases]
    suite = ElementTree.Element(
        "testsuite", name=environment.get("session") or "cases", tests=str(len(cases)),
        failures=str(statuses.count("failure")), errors=str(statuses.count("error")),
        skipped=str(statuses.count("skipped")), time=f"{sum(r.get('duration') or 0 for r in cases):.3f}",
        timestamp=environment.get("started") or "")
    properties = ElementTree.SubElement(suite, "properties")
    for key in ("torch", "cuda", "lightning", "python", "git_commit"):
        if environment.get(key):
            ElementTree.SubElement(properties, "property", name=key, value=str(environment[key]))
    suite.extend(testcase(r) for r in cases)
    root = ElementTree.Element("testsuites")
    root.append(suite)
    for element in root.iter():  # every text a record gave, names and paths included: one escape for all
        element.attrib = {key: xml_text(value) for key, value in element.attrib.items()}
        if element.text is not None:
            element.text = xml_text(element.text)
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode") + "\n"


def write(path: pathlib.Path, found: list[dict]) -> pathlib.Path:
    """Written whole or not at all."""
    records.write_atomically(pathlib.Path(path), '<?xml version="1.0" encoding="utf-8"?>\n' + render(found))
    return pathlib.Path(path)
