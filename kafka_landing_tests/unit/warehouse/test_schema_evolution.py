"""A table's merge rules, one (old type, new type, expected) case per line, and the
properties that make load order irrelevant: the merge is commutative, and merging again
with either side changes nothing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError, merge_schemas, merge_type, table_type


def col(t, nullable=True):
    return {"name": "c", "type": t, "nullable": nullable, "metadata": {}}


def schema(*fields):
    return {"type": "struct", "fields": list(fields)}


def struct(**fields):
    return {"type": "struct", "fields": [{"name": k, "type": v, "nullable": True, "metadata": {}}
                                         for k, v in fields.items()]}


def array(t):
    return {"type": "array", "elementType": t, "containsNull": True}


def smap(t):
    return {"type": "map", "keyType": "string", "valueType": t, "valueContainsNull": True}


CASES = [
    # (old, new, merged)
    ("integer", "long", "long"),
    ("long", "integer", "long"),
    ("float", "double", "double"),
    ("integer", "float", "double"),
    ("integer", "double", "double"),
    ("long", "double", "double"),
    ("long", "float", "double"),
    ("string", "binary", "binary"),
    ("binary", "string", "binary"),
    ("string", "string", "string"),
    ("decimal(10,2)", "decimal(12,2)", "decimal(12,2)"),
    ("decimal(10,2)", "decimal(10,4)", "decimal(12,4)"),
    ("decimal(38,0)", "decimal(10,0)", "decimal(38,0)"),
    (struct(a="string"), struct(a="string", b="long"), struct(a="string", b="long")),
    (struct(a="string", b="long"), struct(a="string"), struct(a="string", b="long")),
    (struct(a="integer"), struct(a="double"), struct(a="double")),
    (array("integer"), array("long"), array("long")),
    (array(struct(a="string")), array(struct(a="string", z="binary")), array(struct(a="string", z="binary"))),
    (smap("float"), smap("double"), smap("double")),
    (smap(struct(x="long")), smap(struct(y="string")), smap(struct(x="long", y="string"))),
]


@pytest.mark.parametrize("old,new,merged", CASES, ids=[f"{o}+{n}" if isinstance(o, str) else f"case{i}"
                                                      for i, (o, n, _) in enumerate(CASES)])
def test_a_registry_compatible_change_merges_into_a_type_holding_both(old, new, merged):
    assert merge_type(table_type(old), table_type(new), "c", "t") == table_type(merged)


REFUSED = [
    ("string", "long"), ("long", "string"), ("boolean", "long"), ("long", "timestamp"), ("date", "integer"),
    ("timestamp", "timestamp_ntz"), ("decimal(10,2)", "long"), ("decimal(38,0)", "decimal(38,2)"),
    (struct(a="string"), "string"), (array("long"), smap("long")), (struct(a="string"), struct(a="long")),
]


@pytest.mark.parametrize("old,new", REFUSED, ids=[f"case{i}" for i in range(len(REFUSED))])
def test_a_change_no_type_can_hold_is_refused_naming_the_field(old, new):
    with pytest.raises(IncompatibleSchemaError, match=r"field 'c") as err:
        merge_schemas(merge_schemas(None, schema(col(old)), "t")[0], schema(col(new)), "ds.t hour H (schema ids [1, 2])")
    assert "ds.t hour H (schema ids [1, 2])" in str(err.value) and not err.value.transient
    assert err.value.nothing_loaded and str(err.value).count("Nothing was loaded") == 1  # the asset adds nothing


def test_a_field_on_one_side_only_becomes_nullable_and_is_reported_as_gained():
    table, _ = merge_schemas(None, schema(col("long", nullable=False) | {"name": "id"},
                                          {"name": "s", "type": struct(a="string"), "nullable": True, "metadata": {}}),
                             "t")
    merged, gained = merge_schemas(table, schema({"name": "id", "type": "long", "nullable": False, "metadata": {}},
                                                 {"name": "s", "type": struct(a="string", b="long"), "nullable": True,
                                                  "metadata": {}},
                                                 {"name": "new", "type": "string", "nullable": False, "metadata": {}}),
                                   "t")
    assert gained == ["s.b", "new"]
    assert merged["fields"] and all(f["nullable"] for f in merged["fields"])


def test_the_table_never_holds_int_or_float_so_those_promotions_change_nothing():
    table, _ = merge_schemas(None, schema(col("integer"), ) | {}, "t")
    assert merge_schemas(table, schema(col("long")), "t") == (table, [])
    table, _ = merge_schemas(None, schema(col(array("float"))), "t")
    assert merge_schemas(table, schema(col(array("double"))), "t") == (table, [])


# --- properties: load order does not matter -----------------------------------------------------

primitives = st.sampled_from(["integer", "long", "float", "double", "string", "binary", "boolean", "date",
                              "timestamp", "decimal(10,2)", "decimal(12,4)", "decimal(5,0)"])


def _types(depth=2):
    if depth == 0:
        return primitives
    inner = _types(depth - 1)
    return st.one_of(
        primitives,
        st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, min_size=1, max_size=3).map(lambda d: struct(**d)),
        inner.map(array),
        inner.map(smap),
    )


def _merge(a, b):
    try:
        return merge_type(table_type(a), table_type(b), "c", "t")
    except IncompatibleSchemaError:
        return None


def _same(a, b) -> bool:
    """Equal up to the order of struct fields (which follows the order of loads)."""
    if isinstance(a, dict) and isinstance(b, dict) and a.get("type") == b.get("type") == "struct":
        fa, fb = ({f["name"]: f for f in x["fields"]} for x in (a, b))
        return fa.keys() == fb.keys() and all(_same(fa[k]["type"], fb[k]["type"]) for k in fa)
    if isinstance(a, dict) and isinstance(b, dict) and a.get("type") == b.get("type"):
        keys = {"array": ("elementType",), "map": ("keyType", "valueType")}[a["type"]]
        return all(_same(a[k], b[k]) for k in keys)
    return a == b


@settings(max_examples=300, deadline=None)
@given(_types(), _types())
def test_merging_is_commutative(a, b):
    ab, ba = _merge(a, b), _merge(b, a)
    assert (ab is None) == (ba is None)
    if ab is not None:
        assert _same(ab, ba)


@settings(max_examples=300, deadline=None)
@given(_types(), _types())
def test_the_merged_type_absorbs_both_sides(a, b):
    ab = _merge(a, b)
    if ab is not None:
        assert _merge(ab, a) == ab and _merge(ab, b) == ab
