"""The Python-Java contract is named once per side, the same on both: contract.py and
Contract.java hold the same names with the same values (the formats, the direct landing's options
and result rows, the body check's config and verdicts, the staged-file folders). A change to one
side alone fails here, as does a string of the contract spelled anew outside its file."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from kafka_landing.avro_landing import avro_schemas, contract
from kafka_landing.defaults import ROOT

SPLICE = ROOT / "jvm/splice/src/main/java/kafkalanding/splice"
CONTRACT_JAVA = SPLICE / "Contract.java"
AVRO_LANDING = Path(contract.__file__).parent

# A Java string literal, char literal or comment, in the order they come: a quote inside a comment
# or a `//` inside a string is then never taken for what it is not.
_JAVA_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|//[^\n]*|/\*.*?\*/', re.S)


def java_strings(source: str) -> list[str]:
    """The string literals of a Java source, as their values."""
    return [json.loads(t) for t in _JAVA_TOKENS.findall(source) if t.startswith('"')]


def java_constants(source: str) -> dict[str, object]:
    """The `static final` String, int and List<String> constants of a Java source by name: each a
    literal, or constants named before it (a list as a tuple)."""
    found: dict[str, object] = {}

    def value(text: str) -> object:
        text = text.strip()
        if text.startswith('"'):
            return json.loads(text)  # \uXXXX as Java writes it
        return int(text) if re.fullmatch(r"-?\d+", text) else found[text]

    declared = r'static final (String|int|List<String>) (\w+)\s*=\s*("(?:[^"\\]|\\.)*"|List\.of\([^)]*\)|[\w-]+)\s*;'
    for kind, name, text in re.findall(declared, source):
        if kind == "List<String>":
            items = re.fullmatch(r"List\.of\((.*)\)", text.strip(), re.S)[1]
            found[name] = tuple(value(t) for t in re.findall(r'"(?:[^"\\]|\\.)*"|\w+', items))
        else:
            found[name] = value(text)
    return found


def python_constants(module) -> dict[str, object]:
    return {name: v for name, v in vars(module).items() if name.isupper()}


def differences(java: dict[str, object], python: dict[str, object]) -> list[str]:
    """What one side names that the other does not, or names otherwise."""
    return ([f"{n}: only in Java" for n in sorted(java.keys() - python.keys())]
            + [f"{n}: only in Python" for n in sorted(python.keys() - java.keys())]
            + [f"{n}: Java {java[n]!r}, Python {python[n]!r}" for n in sorted(java.keys() & python.keys())
               if java[n] != python[n]])


def test_both_sides_name_the_same_contract():
    java = java_constants(CONTRACT_JAVA.read_text())
    assert len(java) > 40 and java["FIELD_SEP"] == "\u0001", "the Java constants were not read: the parser is broken"
    assert {"DIRECT_FORMAT", "OPTION_ROUTES", "KIND_GAP", "STAGED_KEYS", "DEAD", "RESULT_COLUMNS"} <= java.keys()
    assert differences(java, python_constants(contract)) == []


def test_a_change_to_one_side_alone_is_found():
    java_text = CONTRACT_JAVA.read_text()
    python = python_constants(contract)
    renamed_kind = java_text.replace('KIND_FILE = "file"', 'KIND_FILE = "files"')
    assert differences(java_constants(renamed_kind), python) == ["KIND_FILE: Java 'files', Python 'file'"]
    reordered = java_text.replace("List.of(HOUR_KEY, CHUNK_KEY,", "List.of(CHUNK_KEY, HOUR_KEY,")
    assert [d.split(":")[0] for d in differences(java_constants(reordered), python)] == ["STAGED_KEYS"]
    assert differences(java_constants(java_text), {**python, "OPTION_NEW": "new"}) == ["OPTION_NEW: only in Python"]
    assert differences(java_constants(java_text), {k: v for k, v in python.items() if k != "LANDS"}) == [
        "LANDS: only in Java"]


def test_the_result_rows_and_the_landing_files_columns_match_what_python_reads():
    assert contract.RESULT_COLUMNS == contract.ResultRow._fields
    assert contract.ResultRow.of({"kind": contract.KIND_HOUR, "hour_ix": 2, "n": 7, "new_column": 1}) == (
        contract.ResultRow(contract.KIND_HOUR, hour_ix=2, n=7))
    landing_file = java_constants((SPLICE / "LandingFile.java").read_text())
    assert landing_file["KAFKA_COLUMNS"] == tuple(avro_schemas.META_COLUMNS)
    assert contract.DEAD_LETTER_FIELDS == tuple(f["name"] for f in avro_schemas.DEAD_LETTER_SCHEMA["fields"])
    assert [f["name"] for f in avro_schemas.KAFKA_HEADER["fields"]] == ["key", "value"]
    assert contract.ARCHIVE_COLUMNS[:2] == ("key", "value")  # a header's fields are named as the archive's first two


def misspelled_java(sources: dict[str, str], values: set[str]) -> list[str]:
    """(file: literal) of each contract string a Java file spells itself instead of naming it."""
    return [f"{name}: {s!r}" for name, source in sorted(sources.items()) if name != CONTRACT_JAVA.name
            for s in java_strings(source) if s in values]


def contract_strings(constants: dict[str, object]) -> set[str]:
    """The contract's strings that say something (a single character could be anything)."""
    flat = [x for v in constants.values() for x in (v if isinstance(v, tuple) else (v,))]
    return {x for x in flat if isinstance(x, str) and len(x) > 1}


def test_java_spells_the_contract_only_in_contract_java():
    sources = {p.name: p.read_text() for p in SPLICE.glob("*.java")}
    values = contract_strings(java_constants(sources[CONTRACT_JAVA.name]))
    assert len(sources) > 10 and {"kafka-landing-direct", "_kl_part", "bad_framing", "schemaId"} <= values
    assert misspelled_java(sources, values) == []


def test_a_contract_string_spelled_in_java_is_found():
    values = {"file", "_kl_hour"}
    source = ('/* says "file" */ class X { String a = "file"; // "_kl_hour"\n'
              '  String b = "http://x"; char c = \'"\'; String d = "_kl_hour=" ; }')
    assert misspelled_java({"X.java": source, "Contract.java": 'String k = "file";'}, values) == ["X.java: 'file'"]


def python_literals(source: str) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_python_speaks_to_java_only_through_the_contract():
    """direct.py, where the options and the result rows pass, spells none of the contract's
    strings; no landing module but contract.py spells a staged file's folder keys."""
    values = contract_strings(python_constants(contract))
    assert {"schemaId", "bad_framing", "_kl_chunk"} <= values
    assert sorted(python_literals((AVRO_LANDING / "direct.py").read_text()) & values) == []
    keys = set(contract.STAGED_KEYS)
    modules = {p.name: python_literals(p.read_text()) for p in AVRO_LANDING.glob("*.py") if p.name != "contract.py"}
    assert len(modules) > 10 and len(keys) == 4
    assert {name: sorted(found & keys) for name, found in modules.items() if found & keys} == {}
    assert python_literals('F.col("_kl_hour").alias("_kl_hour_ix")') & keys == {"_kl_hour"}  # the check can see one
