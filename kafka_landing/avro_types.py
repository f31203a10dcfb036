"""One walk over an Avro type, for the rewrites that change some of its nodes (logical types
stripped, decimals widened, what Spark reads): each names only what it does to a node. Pure."""

from __future__ import annotations

from collections.abc import Callable


def map_types(t, node: Callable[[dict], dict], collapse: bool = True):
    """`t` with `node` applied to every complex type inside it (a dict, parents first; `node` gets
    a copy), unions, record fields, array items and map values followed; a named type's
    reference (a string) is left as it is. `collapse`: a node left as {"type": "long"} becomes
    "long"."""
    if isinstance(t, list):
        return [map_types(b, node, collapse) for b in t]
    if not isinstance(t, dict):
        return t
    out = node(dict(t))
    kind = out.get("type")
    if kind in ("record", "error") and isinstance(out.get("fields"), list):
        out["fields"] = [{**f, "type": map_types(f["type"], node, collapse)} if isinstance(f, dict) and "type" in f
                         else f for f in out["fields"]]
    elif kind in ("array", "map"):
        key = "items" if kind == "array" else "values"
        if key in out:
            out[key] = map_types(out[key], node, collapse)
    elif isinstance(kind, (dict, list)):
        out["type"] = map_types(kind, node, collapse)
    if collapse and set(out) == {"type"} and isinstance(out["type"], str):
        return out["type"]
    return out


def strip_logical_types(t):
    """The same Avro type with every logicalType removed: the raw longs, ints and bytes,
    which decode whatever their value: reads a file's offsets whatever its other fields hold
    (avro_files.offset_range_in)."""
    return map_types(t, lambda node: {k: v for k, v in node.items() if k not in ("logicalType", "precision", "scale")})


# Avro's limits on a reader: the strict walk refuses a body beyond them (avro_landing/body_rules.py,
# jvm/splice FastCheck), and the engine's Avro readers are started with them (spark_setup.AVRO_LIMITS).
MAX_ITEMS = 10_000_000  # items of one array or map, over all its blocks
MAX_LENGTH = 256 << 20  # bytes of one string or bytes value
