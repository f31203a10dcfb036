"""Is a done file what its path says it is? Checked before anything trusts one.

A done file is the only thing a load reads to know what an hour holds, and
tools other than kafka_landing may write them. One copied to the wrong folder,
or listing a file of another hour (or `../../etc/passwd`), would load the
wrong rows into the wrong partition, silently. So before a load (and before
the sensor asks for one) the dataset, table and hour inside must match the
path, and every listed file must lie in that hour's folder
(`tables/<dataset>/<table>/hour=<H>/`, see `naming.table_hour_dir`).
Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import re

from kafka_landing.errors import KafkaLandingError
from kafka_landing.manifests import DoneFile
from kafka_landing.naming import DONE_FILE_RE, table_hour_dir

_OTHER_HOUR = re.compile(r"^tables/([^/]+)/([^/]+)/hour=([^/]+)/")


class DoneFileMismatch(KafkaLandingError, ValueError):
    """A done file whose contents contradict its path or list files outside its hour."""


def _listed_path_problem(path: object, folder: str) -> str | None:
    if not isinstance(path, str) or not path:
        return "is not a path"
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return "is an absolute path"
    if "\\" in path:
        return "contains a backslash"
    parts = path.split("/")
    if ".." in parts:
        return "contains '..'"
    if any(p in ("", ".") for p in parts):
        return "contains an empty or '.' path component"
    if not path.startswith(folder):
        other = _OTHER_HOUR.match(path)
        if other:
            return f"belongs to {other[1]}.{other[2]} hour {other[3]}, not to this done file's hour"
        return "lies outside the hour's folder"
    if any(p.startswith(("_", ".")) for p in path[len(folder):].split("/")):
        return "is a hidden or staging file (its name starts with '_' or '.')"
    return None


def done_file_problems(rel: str, raw: object) -> list[str]:
    """Every way the done file at `rel` (relative to the landing root) contradicts its
    path; empty when it can be trusted. Each problem names the done file and the field."""
    m = DONE_FILE_RE.match(rel)
    if not m:
        return [f"done file {rel}: its path is not tables/<dataset>/<table>/hour=<YYYY-MM-DDTHH>/_DONE.json"]
    if not isinstance(raw, dict):
        return [f"done file {rel}: is not a JSON object"]
    problems = []
    for field in ("dataset", "table", "hour"):
        if raw.get(field) != m[field]:
            problems.append(f"done file {rel}: field '{field}' is {raw.get(field)!r}, its path says {m[field]!r}")
    folder = table_hour_dir(m["dataset"], m["table"], m["hour"]) + "/"
    files = raw.get("files")
    if not isinstance(files, list):
        problems.append(f"done file {rel}: field 'files' is not a list")
        files = []
    for i, f in enumerate(files):
        path = f.get("path") if isinstance(f, dict) else None
        why = _listed_path_problem(path, folder)
        if why:
            problems.append(f"done file {rel}: field 'files[{i}].path' {path!r} {why}; "
                            f"a done file lists only files under {folder}")
    if not problems:
        try:
            done = DoneFile.from_dict(raw)
        except (KeyError, TypeError, ValueError) as exc:
            return [f"done file {rel}: is not a done file this version reads ({type(exc).__name__}: {exc})"]
        listed = sum(f.rows for f in done.files)
        if done.rows != listed:
            problems.append(f"done file {rel}: field 'rows' is {done.rows}, its files list {listed} rows")
    return problems


def check_done_file(rel: str, raw: object) -> DoneFile:
    """The parsed done file, or DoneFileMismatch naming every problem and what to do."""
    problems = done_file_problems(rel, raw)
    if problems:
        raise DoneFileMismatch(
            "; ".join(problems)
            + ". Nothing was loaded from it: re-land the hour (materialise its avro_landing asset) "
              "or fix the tool that wrote this done file."
        )
    return DoneFile.from_dict(raw)  # type: ignore[arg-type]
