"""The strict walk's rules (jvm/splice FastCheck): why a body does not land, in the words of its
dead letter's reason. The walk refuses a body by a rule's number and the top-level field it was
in; this table, under the same numbers, is the only place the words live (a test pins the
numbers on both sides). Pure: no Spark."""

from __future__ import annotations

from kafka_landing.avro_types import MAX_ITEMS, MAX_LENGTH  # FastCheck's, and the engine's readers'

CORRUPT, VALUE = "corrupt", "value"

# number: (kind, words). A corrupt body's reason is "corrupt body for schema id N: <words> (field
# 'f')"; a value's is "field 'f' <words>", as the decode's value checks word theirs (route.py).
RULES: dict[int, tuple[str, str]] = {
    1: (CORRUPT, "the body ends before its record does"),
    2: (CORRUPT, "a length or item count is negative or runs past the bytes left"),
    3: (CORRUPT, "an array or map block gives a byte size that is not the size of its items"),
    4: (CORRUPT, f"an array or map holds more than {MAX_ITEMS:,} items"),
    5: (CORRUPT, "a union branch or enum symbol index is out of range"),
    6: (CORRUPT, "a boolean byte is neither 0 nor 1 (readers disagree on its value)"),
    7: (CORRUPT, "an int or long varint holds bits past its width (readers disagree on its value)"),
    8: (CORRUPT, "bytes follow the end of its record"),
    9: (VALUE, "holds a string that is not valid UTF-8"),
    10: (VALUE, "holds a date or time out of range (before year 1 or after 9999)"),
    11: (VALUE, "holds a time of day out of range (below 0 or from 24 h on)"),
    12: (VALUE, "holds a uuid string that is not a UUID (8-4-4-4-12 hex digits)"),
    13: (VALUE, "holds a decimal with more digits than its precision"),
    14: (CORRUPT, f"a string or bytes value is longer than {MAX_LENGTH:,} bytes"),
    15: (VALUE, "holds a decimal of zero bytes (readers disagree on its value)"),
}

NOT_UTF8, TIME_RANGE, NOT_UUID = RULES[9][1], RULES[10][1], RULES[12][1]


def reason(rule: int, field: str | None, schema_id: int) -> str:
    """A refused body's dead-letter reason, as decode.dead_reason builds it in the JVM."""
    kind, words = RULES[rule]
    if kind == VALUE:
        return f"field {field!r} {words}"
    return f"corrupt body for schema id {schema_id}: {words}" + (f" (field {field!r})" if field else "")
