"""The layout keeps its promises: Dagster only in the files whose role is Dagster,
Spark only where the heavy work runs, and every layer in the direction of the flow."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import kafka_landing

PACKAGE = Path(kafka_landing.__file__).parent
TOOLS_PACKAGE = PACKAGE.parent / "kafka_landing_tools"
LAYERS = ("kafka_slices", "avro_landing", "warehouse")  # the flow's, in its order
DAGSTER_ROLES = {"assets.py", "checks.py", "sensors.py", "resources.py", "jobs.py"}
# Outside the layers: the code location, hourly partitions and per-hour reporting, the run launcher.
DAGSTER_TOP = {"definitions.py", "hours.py", "resources.py", "run_launcher.py"}
SPARK_FILES = {"spark_setup.py", "avro_landing/read.py", "avro_landing/decode.py", "avro_landing/route.py", "avro_landing/write.py",
               "avro_landing/direct.py", "avro_landing/job.py", "warehouse/iceberg/files.py"}


def importers(module: str) -> set[str]:
    pattern = re.compile(rf"^\s*(import {module}\b|from {module}[\s.])", re.M)
    return {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if pattern.search(p.read_text())}


def allowed_dagster(rel: str) -> bool:
    """A package inside a layer (warehouse/queue/, warehouse/bigquery/) is pure, whatever its files' names."""
    parts = rel.split("/")
    return rel in DAGSTER_TOP or (len(parts) == 2 and parts[0] in LAYERS and parts[1] in DAGSTER_ROLES)


def test_only_files_whose_role_is_dagster_import_it():
    found = importers("dagster") | importers("dagster_pyspark") | importers("dagster_gcp")
    assert found, "no file imports dagster: the pattern is broken"
    assert sorted(f for f in found if not allowed_dagster(f)) == []


def test_a_dagster_role_is_a_file_of_a_layer_not_of_a_package_inside_it():
    assert allowed_dagster("warehouse/jobs.py") and allowed_dagster("kafka_slices/assets.py")
    assert not allowed_dagster("warehouse/bigquery/jobs.py") and not allowed_dagster("warehouse/queue/tick.py")


# The hand-off's markers have one owner on each side: publish (and the event index) write them, the
# queue's tick and reconciliation read them, the load step (`warehouse/load.py`, with the event
# partition's load it calls, `by_event/load.py`) clears or refuses them, and the event checks' measures
# read (never write) what waits. Dagster files and warehouse backends only call those.
MARKER_OWNERS = {"handoff/markers.py", "handoff/event_index.py", "avro_landing/publish.py", "warehouse/queue/tick.py",
                 "warehouse/queue/reconcile.py", "warehouse/load.py", "warehouse/by_event/load.py",
                 "warehouse/by_event/measures.py"}


def test_the_markers_are_touched_only_by_their_owners():
    found = importers(r"kafka_landing\.handoff\.markers") | {
        str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
        if re.search(r"^\s*from kafka_landing\.handoff import (.*\b)?markers\b", p.read_text(), re.M)}
    assert "warehouse/queue/tick.py" in found, "the pattern finds no importer: it is broken"
    assert sorted(found - MARKER_OWNERS) == []


def test_spark_only_where_the_heavy_work_runs():
    found = importers("pyspark")
    assert found, "no file imports pyspark: the pattern is broken"
    assert sorted(found - SPARK_FILES) == []


# The flow: kafka_slices -> avro_landing -> warehouse. A module imports only what comes before
# it (or beside it); the shared modules below every layer import no layer; nothing in the product
# imports the code location, and nothing in the product imports the tools that drive it
# (kafka_landing_tools: the local stack, the demo, the benchmark) or the tests. A package inside a
# layer (warehouse/queue/) is part of that layer; a shared package (handoff/: the contract landing
# writes and loading reads; store/: the landing root) sits below every layer like the shared modules.
# The shared resources (resources.py: the registry, the landing root, Spark) are Dagster wiring
# the layers share: above the shared modules, below every layer; a layer's own resources are in
# its resources.py. Every module falls under exactly one of these rule sets (`rule_sets`).
SHARED = {"__init__.py", "config.py", "naming.py", "errors.py", "avro_files.py", "avro_types.py", "crash_points.py",
          "hours.py", "hourly_schedule.py", "defaults.py", "spark_setup.py", "run_worker.py", "run_launcher.py"}
SHARED_PACKAGES = ("handoff", "store")
SHARED_RESOURCES = {"resources.py"}
OUTSIDE = ("kafka_landing_tools", "kafka_landing_tests")  # packages beside the product that use it
ENTRY_POINTS = {"definitions.py", "__main__.py"}


def rule_sets(rel: str) -> list[str]:
    """The rule sets of the flow that module `rel` (path inside the package) falls under."""
    parts = rel.split("/")
    inside = parts[0] if len(parts) > 1 else None  # the package at the top that holds it
    held = {
        f"layer {inside}": inside in LAYERS,
        "shared": rel in SHARED or inside in SHARED_PACKAGES,
        "shared resources": rel in SHARED_RESOURCES,
        "entry point": rel in ENTRY_POINTS,
    }
    return [name for name, holds in held.items() if holds]


def project_imports(source: str) -> set[str]:
    """Every kafka_landing module a source imports, at any depth (imports inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0].startswith("kafka_landing"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)  # `from kafka_landing import x`
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0].startswith("kafka_landing"))
    return found


def backwards_imports(rel: str, imported: set[str]) -> list[str]:
    """The imports of module `rel` (path inside the package) that break the flow's rules."""
    parts = rel.split("/")
    top = parts[0].removesuffix(".py")

    def never(why: str, *prefixes: str, but: tuple[str, ...] = ()) -> list[str]:
        return [f"{rel} imports {m}: {why}" for m in sorted(imported)
                if any(m == f"kafka_landing.{p}" or m.startswith(f"kafka_landing.{p}.") for p in prefixes)
                and not any(m == f"kafka_landing.{b}" or m.startswith(f"kafka_landing.{b}.") for b in but)]

    found = [f"{rel} imports {m}: the product never imports the tools or the tests" for m in sorted(imported)
             if m.split(".")[0] in OUTSIDE]
    if rel not in ENTRY_POINTS:
        found += never("nothing imports the code location", "definitions")
    if top == "kafka_slices":
        found += never("planning comes before landing and loading", "avro_landing", "warehouse")
    if top == "avro_landing":
        found += never("landing comes before loading (the hand-off is kafka_landing.handoff)", "warehouse")
    if top == "warehouse":
        found += never("loading uses earlier layers only through their assets' keys", "avro_landing", "kafka_slices",
                       but=("avro_landing.assets", "kafka_slices.assets"))
    if "shared" in rule_sets(rel):
        found += never("shared modules sit below every layer", "kafka_slices", "avro_landing", "warehouse",
                       "resources")
    if rel in SHARED_RESOURCES:
        found += never("the shared resources sit below every layer (a layer's own are in its resources.py)",
                       "kafka_slices", "avro_landing", "warehouse")
    return found


def test_every_module_falls_under_exactly_one_rule_set():
    modules = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py"))
    assert len(modules) > 40 and {"warehouse/by_event/versions.py", "resources.py", "__init__.py"} <= set(modules)
    assert {rel: rule_sets(rel) for rel in modules if len(rule_sets(rel)) != 1} == {}


def test_a_module_under_no_rule_set_or_two_is_found(monkeypatch):
    assert rule_sets("new_module.py") == [] and rule_sets("new_package/steps.py") == []
    assert rule_sets("naming.py") == ["shared"] and rule_sets("store/gcs.py") == ["shared"]
    assert rule_sets("resources.py") == ["shared resources"]
    assert rule_sets("kafka_slices/resources.py") == ["layer kafka_slices"]
    assert rule_sets("warehouse/queue/tick.py") == ["layer warehouse"]
    assert rule_sets("warehouse/by_event/versions.py") == ["layer warehouse"]
    monkeypatch.setitem(globals(), "SHARED", SHARED | {"resources.py"})
    assert rule_sets("resources.py") == ["shared", "shared resources"]


def test_imports_follow_the_flow():
    modules = {str(p.relative_to(PACKAGE)): project_imports(p.read_text()) for p in PACKAGE.rglob("*.py")}
    assert len(modules) > 40 and any("kafka_landing.handoff" in m for m in modules.values())
    assert [f for rel, imported in sorted(modules.items()) for f in backwards_imports(rel, imported)] == []


def test_a_backwards_import_fails_the_flow_rule():
    assert backwards_imports("avro_landing/publish.py", {"kafka_landing.warehouse.queue.runs"}) != []
    assert backwards_imports("handoff/markers.py", {"kafka_landing.warehouse.queue.runs"}) != []
    assert backwards_imports("handoff/event_index.py", {"kafka_landing.avro_landing.publish"}) != []
    assert backwards_imports("handoff/manifests.py", {"kafka_landing.resources"}) != []
    assert backwards_imports("warehouse/queue/tick.py", {"kafka_landing.avro_landing.publish"}) != []
    assert backwards_imports("warehouse/queue/runs.py", {"kafka_landing.definitions"}) != []
    assert backwards_imports("kafka_slices/dry_run.py", {"kafka_landing.avro_landing.job"}) != []
    assert backwards_imports("warehouse/sensors.py", {"kafka_landing.definitions"}) != []
    assert backwards_imports("config.py", {"kafka_landing.kafka_slices.plan"}) != []
    assert backwards_imports("spark_setup.py", {"kafka_landing_tools.devstack"}) != []
    assert backwards_imports("warehouse/checks.py", {"kafka_landing.avro_landing.conservation"}) != []
    assert backwards_imports("handoff/event_index.py", {"kafka_landing.warehouse.by_event.versions"}) != []
    assert backwards_imports("warehouse/by_event/load.py", {"kafka_landing.avro_landing.publish"}) != []
    assert backwards_imports("resources.py", {"kafka_landing.kafka_slices.kafka_log"}) != []
    assert backwards_imports("resources.py", {"kafka_landing.definitions"}) != []
    assert backwards_imports("store/gcs.py", {"kafka_landing.warehouse.bigquery"}) != []
    assert backwards_imports("__init__.py", {"kafka_landing.avro_landing.job"}) != []
    assert backwards_imports("warehouse/jobs.py", {"kafka_landing.kafka_slices.resources"}) != []
    # and what the flow allows
    assert backwards_imports("warehouse/assets.py", {"kafka_landing.avro_landing.assets"}) == []
    assert backwards_imports("avro_landing/job.py", {"kafka_landing.kafka_slices.plan", "kafka_landing.handoff"}) == []
    assert backwards_imports("__main__.py", {"kafka_landing.definitions"}) == []
    assert backwards_imports("resources.py", {"kafka_landing.config", "kafka_landing.store"}) == []
    assert backwards_imports("kafka_slices/resources.py", {"kafka_landing.kafka_slices.kafka_log"}) == []
    assert backwards_imports("avro_landing/assets.py", {"kafka_landing.kafka_slices.resources",
                                                        "kafka_landing.resources"}) == []
    assert backwards_imports("warehouse/by_event/versions.py", {"kafka_landing.handoff.event_index",
                                                                "kafka_landing.naming"}) == []
    assert backwards_imports("avro_landing/publish.py", {"kafka_landing.handoff.markers",
                                                         "kafka_landing.handoff.event_index"}) == []
    assert backwards_imports("warehouse/queue/tick.py", {"kafka_landing.handoff.markers",
                                                         "kafka_landing.warehouse.queue.runs"}) == []
    assert backwards_imports("handoff/event_index.py", {"kafka_landing.handoff.markers", "kafka_landing.naming",
                                                        "kafka_landing.store.base"}) == []


def test_the_tools_are_outside_the_product():
    assert [p.name for p in PACKAGE.iterdir() if p.stem in {"devstack", "bench", "demo"}] == []
    assert TOOLS_PACKAGE.is_dir() and (TOOLS_PACKAGE / "devstack.py").exists()


def test_every_layer_holds_its_steps():
    for layer, steps in {
        "kafka_slices": ["plan.py", "freeze.py", "kafka_log.py", "resources.py", "assets.py"],
        "avro_landing": ["read.py", "decode.py", "route.py", "write.py", "publish.py", "job.py", "assets.py"],
        "warehouse": ["load.py", "iceberg/warehouse.py", "bigquery/warehouse.py", "by_event/versions.py",
                      "by_event/load.py", "by_event/measures.py", "assets.py", "checks.py", "sensors.py"],
        "store": ["base.py", "local.py", "gcs.py"],
    }.items():
        assert [s for s in steps if not (PACKAGE / layer / s).exists()] == [], layer


def test_no_two_modules_define_a_public_function_of_the_same_name():
    defs: dict[str, list[str]] = {}
    for p in PACKAGE.rglob("*.py"):
        for name in re.findall(r"^def ([a-z]\w*)\(", p.read_text(), re.M):
            defs.setdefault(name, []).append(str(p.relative_to(PACKAGE)))
    # Each layer's assets.py builds its own assets under the same conventional names.
    twice = {n: sorted(ps) for n, ps in defs.items() if len(ps) > 1 and n != "main"}  # entry points
    assert twice == {}


# Sizes a newcomer can hold in mind, everywhere in the package: no class over 350 lines, no function
# over 60 lines or 7 parameters (`self`/`cls` aside; keyword-only ones count). The 619-line Iceberg
# class, the 86-line landing asset and the 14-parameter BigQuery attempt were cut down to them.
MAX_CLASS_LINES, MAX_FUNCTION_LINES, MAX_PARAMETERS = 350, 60, 7


def oversized(source: str, where: str, max_function: int | None = MAX_FUNCTION_LINES,
              max_parameters: int = MAX_PARAMETERS) -> list[str]:
    """The classes over MAX_CLASS_LINES in `source`, and its functions over `max_function` lines or
    `max_parameters` parameters (a nested function is measured on its own, and inside its parent)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        lines = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
        if isinstance(node, ast.ClassDef) and lines > MAX_CLASS_LINES:
            found.append(f"{where}:{node.lineno} class {node.name}: {lines} lines")
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if max_function and lines > max_function:
            found.append(f"{where}:{node.lineno} {node.name}: {lines} lines")
        a = node.args
        names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg not in ("self", "cls")]
        count = len(names) + (a.vararg is not None) + (a.kwarg is not None)
        if count > max_parameters:
            found.append(f"{where}:{node.lineno} {node.name}: {count} parameters")
    return found


def test_no_class_over_350_lines_and_no_function_over_60_lines_or_7_parameters():
    files = sorted(PACKAGE.rglob("*.py"))
    assert any(p.parent.name == "iceberg" for p in files), "the rule does not look where the package is"
    assert [hit for p in files for hit in oversized(p.read_text(), str(p.relative_to(PACKAGE)))] == []


def test_an_oversized_class_or_function_is_found():
    body = "class Big:\n" + "    x = 1\n" * MAX_CLASS_LINES + "def long():\n" + "    pass\n" * MAX_FUNCTION_LINES
    assert [hit.split(" ", 1)[1].split(":")[0] for hit in oversized(body, "t")] == ["class Big", "long"]
    assert oversized(body.replace("    x = 1\n", "", 1).replace("    pass\n", "", 1), "t") == []
    many = "def f(self, a, b, c, d, e, f, *g, h):\n    pass\ndef ok(self, a, b, c, d, e, f, *, g):\n    pass\n"
    assert oversized(many, "t") == ["t:1 f: 8 parameters"]


def private_imports(source: str, where: str) -> list[str]:
    """Names starting with `_` that `source` imports from a module of the product (its private helpers)."""
    return [f"{where}:{node.lineno} imports {node.module}.{a.name}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "kafka_landing"
            for a in node.names if a.name.startswith("_")]


def test_no_module_imports_another_modules_private_helper():
    found = [hit for p in sorted(PACKAGE.rglob("*.py"))
             for hit in private_imports(p.read_text(), str(p.relative_to(PACKAGE)))]
    assert found == [], "make it public where it belongs, or keep it where it is used"


def test_a_private_import_is_found():
    assert private_imports("from kafka_landing.warehouse.x import _helper, public\n", "t") == [
        "t:1 imports kafka_landing.warehouse.x._helper"]
    assert private_imports("from __future__ import annotations\nfrom os import _exit\n", "t") == []


TESTS = Path(__file__).resolve().parents[1]
_WRAPPERS = {"sorted", "list", "set", "tuple", "iter", "reversed"}
_VIEWS = {"values", "items", "keys"}


def _collection(node: ast.expr) -> ast.expr:
    """`sorted(x.values())` -> `x`: the collection a comprehension walks."""
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _WRAPPERS and node.args:
            node = node.args[0]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _VIEWS:
            node = node.func.value
        else:
            return node


def _quantified(node: ast.Assert) -> ast.Call | None:
    """The quantifier call of an assert over a comprehension: all(...) asserted, or any(...) denied."""
    negated = isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)
    test = node.test.operand if negated else node.test
    quantifier = "any" if negated else "all"
    if (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == quantifier
            and test.args and isinstance(test.args[0], (ast.GeneratorExp, ast.ListComp, ast.SetComp))):
        return test
    return None


def vacuous_asserts(source: str, where: str) -> list[str]:
    """An all(... for x in c) asserted, or an any(...) denied, passes when `c` is empty: each must follow,
    in its function, an assert that mentions `c` (its length, its contents), unless `c` is a literal
    or a range, or the line says `# empty is fine: <why>`. Cheap to satisfy, and it makes the
    writer say what the collection should hold."""
    found, lines = [], source.splitlines()
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        asserts = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Assert)), key=lambda n: n.lineno)
        for i, node in enumerate(asserts):
            test = _quantified(node)
            if test is None:
                continue
            walked = _collection(test.args[0].generators[0].iter)
            if isinstance(walked, (ast.List, ast.Tuple, ast.Set)) and walked.elts:
                continue
            if isinstance(walked, ast.Call) and isinstance(walked.func, ast.Name) and walked.func.id == "range":
                continue
            name = ast.unparse(walked)
            if "# empty is fine" in lines[node.lineno - 1]:  # said on purpose, with the reason
                continue
            if not any(name in ast.unparse(a.test) for a in asserts[:i] if _quantified(a) is None):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)[:100]}")
    return found


def test_no_assert_over_a_collection_passes_because_it_is_empty():
    found = [hit for p in sorted(TESTS.rglob("test_*.py"))
             for hit in vacuous_asserts(p.read_text(), str(p.relative_to(TESTS)))]
    assert not found, "assert that each collection holds what it should first:\n" + "\n".join(found)


def test_the_vacuous_assert_check_can_fail():
    every, none = "assert " + "all", "assert not " + "any"  # spelled apart: the texts below are inputs
    body = "def test_x(runs):\n    {}\n    " + every + "(r.ok for r in runs.values())\n"
    assert vacuous_asserts(body.format("pass"), "t") == [f"t:3: {every}((r.ok for r in runs.values()))"]
    assert vacuous_asserts(body.format("assert len(runs) == 3"), "t") == []
    negated = vacuous_asserts(f"def test_y(xs):\n    {none}(x for x in xs)\n", "t")
    assert negated == [f"t:2: {none}((x for x in xs))"]
    assert vacuous_asserts(f"def test_z():\n    {every}(x > 0 for x in (1, 2))\n", "t") == []
    # one vacuous assert does not vouch for the next
    twice = f"def test_w(xs):\n    {every}(x for x in xs)\n    {every}(not x for x in xs)\n"
    assert [hit.split(":")[1] for hit in vacuous_asserts(twice, "t")] == ["2", "3"]


def misplaced_unit_tests(rel_paths: list[str]) -> list[str]:
    """Unit test files that do not say which module they test: `unit/<layer>/test_<module>[_<aspect>].py`
    for a step module of that layer (`unit/<layer>/<package>/...` for a module of a package inside it,
    `unit/<package>/...` for a module of a shared package), `unit/test_<module>[_<aspect>].py` for a
    shared module (or a tool of `kafka_landing_tools/`, a module or a package, or a test support module of
    `kafka_landing_tests/`);
    `test_layout.py` tests the package itself."""
    def modules(folder: Path) -> set[str]:
        return {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}

    tools = modules(TOOLS_PACKAGE) | {p.name for p in TOOLS_PACKAGE.iterdir() if (p / "__init__.py").exists()}
    shared = modules(PACKAGE) | tools | modules(TESTS) | {"layout"}
    found = []
    for rel in rel_paths:
        *layer, name = Path(rel).parts
        known = modules(PACKAGE.joinpath(*layer)) if layer else shared  # no such package: no module
        stem = name[len("test_"):-len(".py")]
        if not any(stem == m or stem.startswith(f"{m}_") for m in known):
            found.append(rel)
    return found


def test_unit_tests_mirror_the_package():
    unit = TESTS / "unit"
    rels = [str(p.relative_to(unit)) for p in sorted(unit.rglob("test_*.py"))]
    assert len(rels) > 20
    assert misplaced_unit_tests(rels) == [], "name each unit test file after the module it tests"


def test_a_unit_test_named_after_no_module_is_found():
    assert misplaced_unit_tests(["warehouse/test_planning.py", "test_sensor_scale.py", "kafka_slices/x/test_plan.py",
                                 "avro_landing/test_plan.py"]) == [
        "warehouse/test_planning.py", "test_sensor_scale.py", "kafka_slices/x/test_plan.py", "avro_landing/test_plan.py"]
    assert misplaced_unit_tests(["warehouse/queue/test_sensors.py", "queue/test_tick.py", "handoff/test_load.py",
                                 "test_markers.py"]) == [
        "warehouse/queue/test_sensors.py", "queue/test_tick.py", "handoff/test_load.py", "test_markers.py"]
    assert misplaced_unit_tests(["kafka_slices/test_plan_tasks.py", "test_config.py", "test_bigquery_fake.py",
                                 "warehouse/queue/test_tick.py", "handoff/test_markers.py"]) == []


# The JVM operators (jvm/splice) keep the shape their split by role gave them: a file per role, as
# Spark's own Kafka source has, none over 400 lines, no method over 60.
JVM = PACKAGE.parent / "jvm"
JAVA_MAX_LINES = 400
JAVA_MAX_METHOD_LINES = 60
# Strings, chars and comments, in the order they come: blanked before the code is read, so a brace
# or a word inside one is never taken for code.
_JAVA_NOISE = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|//[^\n]*|/\*.*?\*/', re.S)
_JAVA_METHOD = re.compile(r"^[ \t]*(?:(?:public|protected|private|static|final|synchronized|abstract|default)\s+)*"
                          r"(?:<[^;{}()=]*?>\s+)?(?:[\w.]+(?:<[^;{}()=]*?>)?(?:\[\])*\s+)?"  # type parameters, type
                          r"(\w+)\s*\([^;{}]*\)\s*(?:throws\s[^;{}]*)?\{", re.M)
_NOT_METHODS = {"if", "for", "while", "switch", "catch", "synchronized", "return", "new", "try"}


def java_code(source: str) -> str:
    """The source with its strings, chars and comments blanked, lines kept."""
    return _JAVA_NOISE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), source)


def _closing(code: str, opening: int) -> int:
    """Where the brace opened at `opening` closes."""
    depth = 0
    for at in range(opening, len(code)):
        depth += {"{": 1, "}": -1}.get(code[at], 0)
        if depth == 0:
            return at
    raise ValueError("a brace never closes")


def java_methods(source: str) -> dict[str, int]:
    """{name:line: lines} of each method and constructor, from its signature to its closing brace."""
    code = java_code(source)
    found = {}
    for m in _JAVA_METHOD.finditer(code):
        if m[1] in _NOT_METHODS:
            continue
        start = code.count("\n", 0, m.start()) + 1
        found[f"{m[1]}:{start}"] = code.count("\n", m.start(), _closing(code, m.end() - 1)) + 1
    return found


def java_top_level_types(source: str) -> list[str]:
    """The classes, interfaces, enums and records a Java source declares outside any other."""
    code, depth, found = java_code(source), 0, []
    for m in re.finditer(r"[{}]|\b(?:class|interface|enum|record)\s+(\w+)", code):
        if m[0] in "{}":
            depth += 1 if m[0] == "{" else -1
        elif depth == 0:
            found.append(m[1])
    return found


def java_sources() -> dict[str, str]:
    return {str(p.relative_to(JVM)): p.read_text() for p in sorted(JVM.rglob("*.java"))}


def test_no_java_file_is_over_400_lines():
    sources = java_sources()
    assert len(sources) > 10, "no Java source found under jvm/"
    assert {rel: n for rel, s in sources.items() if (n := len(s.splitlines())) > JAVA_MAX_LINES} == {}


def test_no_java_method_is_over_60_lines():
    methods = {f"{rel}:{m}": n for rel, s in java_sources().items() for m, n in java_methods(s).items()}
    assert len(methods) > 80 and any("RangeLanding.java:land:" in m for m in methods), "the pattern finds no method"
    assert {m: n for m, n in methods.items() if n > JAVA_MAX_METHOD_LINES} == {}


def test_each_java_file_holds_one_top_level_class_named_after_it():
    sources = java_sources()
    assert len(sources) > 10
    assert {rel: java_top_level_types(s) for rel, s in sources.items()
            if java_top_level_types(s) != [Path(rel).stem]} == {}


def test_a_long_java_method_or_a_second_class_is_found():
    body = "\n".join(f"    x += {i};" for i in range(61))
    source = ("/** a class { in a comment } */\nfinal class A {\n  private static final String S = \"}{\";\n"
              f"  A(int x) {{\n    if (x > 0) {{\n      x = 1;\n    }}\n  }}\n\n"
              f"  static <T> List<T> longest(Map<String, int[]> m,\n      long y) throws IOException {{\n{body}\n  }}\n}}\n"
              "class B {}\n")
    assert java_methods(source) == {"A:4": 5, "longest:10": 64}
    assert java_top_level_types(source) == ["A", "B"]
