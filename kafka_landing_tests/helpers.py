"""What several test files need and the product does not: readers of what landing wrote."""

from __future__ import annotations

from kafka_landing.manifests import DoneFile


def parse_landing_file_name(name: str) -> dict:
    """The fields `naming.landing_file_name` put in a landing file's name."""
    stem = name[:-5] if name.endswith(".avro") else name
    parts = stem.split("+")
    if len(parts) not in (6, 7):
        raise ValueError(f"{name!r} is not a landing file name")
    dataset, _, table = parts[2].partition(".")
    return {
        "topic": parts[0], "partition": int(parts[1]), "dataset": dataset, "table": table,
        "schema_id": int(parts[3]), "first_offset": int(parts[4]), "last_offset": int(parts[5]),
        "event_hour": parts[6] if len(parts) == 7 else None,
    }


def content_key(done: DoneFile) -> dict:
    """What a done file's hour contains, without when or by which attempt it was landed, nor
    the files' bytes (Avro sync markers are random: same rows, other bytes)."""
    d = done.to_dict()
    d.pop("attempt"), d.pop("landed_at")
    for f in d["files"] + d["dead_letters"]["files"]:
        f.pop("bytes"), f.pop("crc32c", None)
    return d
