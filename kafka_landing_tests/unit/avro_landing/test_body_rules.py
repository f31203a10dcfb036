"""The strict walk's rules are numbered in Java (BodyRules, broken by BodyWalk) and worded in Python
(body_rules.py): the two sides must name the same rules by the same numbers, with the same limits,
or a dead letter would give another rule's reason. A change to one side alone fails here (the
verdicts are the contract's: test_contract.py)."""

from __future__ import annotations

import re

from kafka_landing.avro_landing import body_rules
from kafka_landing.avro_types import MAX_ITEMS, MAX_LENGTH
from kafka_landing.defaults import ROOT
from kafka_landing.spark_setup import AVRO_LIMITS

SPLICE = ROOT / "jvm/splice/src/main/java/kafkalanding/splice"
BODY_RULES = (SPLICE / "BodyRules.java").read_text()
BODY_WALK = (SPLICE / "BodyWalk.java").read_text()


def java_ints(pattern: str) -> dict[str, int]:
    return {name: int(value.replace("_", "")) for name, value in
            re.findall(rf"static final int ({pattern}) = ([\d_]+);", BODY_RULES)}


def test_every_rule_has_one_number_on_both_sides_and_the_walk_breaks_each():
    rules = java_ints(r"RULE_\w+")
    assert len(rules) >= 10, "the Java rules were not found: the pattern no longer matches BodyRules.java"
    assert sorted(rules.values()) == sorted(body_rules.RULES), "a rule numbered on one side only"
    assert len(set(rules.values())) == len(rules), "two Java rules share a number"
    never_broken = [name for name in rules if not re.search(rf"dead\({name}\b", BODY_WALK)]
    assert never_broken == [], "a rule the walk never breaks"


def test_limits_are_the_same_on_both_sides():
    assert java_ints("MAX_ITEMS") == {"MAX_ITEMS": MAX_ITEMS}
    assert re.search(r"MAX_LENGTH = 256 << 20;", BODY_RULES) and MAX_LENGTH == 256 << 20
    # The engine's Avro readers stop where the walk does.
    assert f"collectionItems.maxLength={MAX_ITEMS}" in AVRO_LIMITS
    assert f"bytes.maxLength={MAX_LENGTH}" in AVRO_LIMITS and f"string.maxLength={MAX_LENGTH}" in AVRO_LIMITS


def test_reasons_name_the_schema_id_and_the_field():
    assert body_rules.reason(3, "xs", 7) == ("corrupt body for schema id 7: an array or map block gives a byte size "
                                            "that is not the size of its items (field 'xs')")
    assert body_rules.reason(8, None, 7) == "corrupt body for schema id 7: bytes follow the end of its record"
    assert body_rules.reason(11, "at", 7) == "field 'at' holds a time of day out of range (below 0 or from 24 h on)"
    # The decoding way's value checks word theirs the same (route.VALUE_CHECKS).
    from kafka_landing.avro_landing.route import NOT_A_UUID, VALUE_CHECKS
    assert [w for _, w in VALUE_CHECKS] + [NOT_A_UUID] == [body_rules.RULES[n][1] for n in (9, 10, 12)]
