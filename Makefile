# kafka_landing: set up, run the local stack, the demo, the tests and the benchmark.
# Every target installs what it needs first; re-running downloads nothing new.

SHELL := /bin/bash
PY := .venv/bin/python
export DAGSTER_HOME := $(CURDIR)/.local/dagster_home

# KAFKA_LANDING_INSTANCE=postgres: the Dagster instance of deploy/dagster.postgres.yaml on the
# stack's PostgreSQL (started by stack-up); your own DAGSTER_PG_* settings win.
ifeq ($(KAFKA_LANDING_INSTANCE),postgres)
INSTANCE_YAML := deploy/dagster.postgres.yaml
export DAGSTER_PG_HOST ?= 127.0.0.1
export DAGSTER_PG_PORT ?= $(or $(KAFKA_LANDING_STACK_POSTGRES_PORT),18432)
export DAGSTER_PG_USERNAME ?= dagster
export DAGSTER_PG_PASSWORD ?= dagster
export DAGSTER_PG_DB ?= dagster
else
INSTANCE_YAML := dagster.yaml
endif

.PHONY: setup instance jvm stack-up stack-down stack-status demo demo-reset test fuzz bench bench-quick clean

setup: .venv/.installed .venv-spark41/.installed .jvm/.fetched instance

.venv/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

# A reader of the tables, not the product: Spark 4.1 with Iceberg's own runtime (none is published
# for the product's Spark 4.2), in an environment of its own, as a user's Spark reads the tables
# (the docs test runs docs/concepts.md's example with it).
SPARK41 = pyspark==4.1.4
.venv-spark41/.installed: Makefile
	test -x .venv-spark41/bin/python || python3 -m venv .venv-spark41
	.venv-spark41/bin/python -m pip install -q "$(SPARK41)"
	touch $@

jvm: .jvm/.fetched

# The JVM dependency list is jvm/pom.xml: the Kafka broker, the Spark
# connectors, the schema registry and avro-tools (a reader for the tests), each
# copied into its own folder; then
# the splice writer (jvm/splice) is built into .jvm/spark beside the connectors.
.jvm/.fetched: jvm/pom.xml jvm/splice/pom.xml $(shell find jvm/splice/src -type f)
	@command -v mvn >/dev/null || { echo "Maven (mvn) is missing: apt-get install maven"; exit 1; }
	@command -v java >/dev/null || { echo "Java is missing: apt-get install openjdk-17-jdk-headless"; exit 1; }
	# An upgrade leaves no jar of the version before; Maven's unpack markers go too, or it would skip the unpack.
	rm -rf $(CURDIR)/.jvm/kafka $(CURDIR)/.jvm/spark $(CURDIR)/.jvm/iceberg-rest $(CURDIR)/.jvm/spark41 $(CURDIR)/.jvm/tools $(CURDIR)/.jvm/registry jvm/target/dependency-maven-plugin-markers
	cd jvm && mvn -q -B -Pkafka dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/.jvm/kafka
	cd jvm && mvn -q -B -Pspark dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/.jvm/spark
	cd jvm && mvn -q -B -Piceberg-rest dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/.jvm/iceberg-rest
	cd jvm && mvn -q -B -Pspark41-iceberg dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/.jvm/spark41
	cd jvm && mvn -q -B -Pregistry package -Djvm.dir=$(CURDIR)/.jvm
	cd jvm && mvn -q -B -Ptools package -Djvm.dir=$(CURDIR)/.jvm
	cd jvm/splice && mvn -q -B package -Djvm.dir=$(CURDIR)/.jvm
	touch $@

# The instance's config, copied every time: switching KAFKA_LANDING_INSTANCE switches it.
instance:
	mkdir -p $(DAGSTER_HOME)
	cp $(INSTANCE_YAML) $(DAGSTER_HOME)/dagster.yaml

stack-up: setup
	$(PY) -m kafka_landing_tools.devstack up

stack-down:
	$(PY) -m kafka_landing_tools.devstack down

stack-status:
	$(PY) -m kafka_landing_tools.devstack status

# Produce demo data, land the last closed hours, print a summary, open the UI.
# DEMO_STORAGE=gcs: the landing root is a bucket on the local GCS emulator (fake-gcs-server),
# written by Spark through the GCS connector; the Iceberg warehouse loads from it.
ifeq ($(DEMO_STORAGE),gcs)
demo: export STORAGE_EMULATOR_HOST := http://127.0.0.1:$(or $(KAFKA_LANDING_STACK_GCS_PORT),18082)
demo: export KAFKA_LANDING_ROOT := gs://kafka-landing-demo/landing
endif
demo: stack-up
	$(PY) -m kafka_landing_tools.demo.run
	$(if $(DEMO_NO_UI),,.venv/bin/dagster dev -w workspace.yaml)

# Start the demo from nothing: stop the stack, wipe its data and the landing root.
demo-reset:
	-$(PY) -m kafka_landing_tools.devstack down --wipe
	rm -rf .local/landing .local/warehouse $(DAGSTER_HOME)

# pytest exits non-zero (5) when it collects no test, so an empty run fails here.
test: stack-up
	$(PY) -m pytest $(PYTEST_ARGS)

# The differential fuzz of bodies alone, with FUZZ_EXAMPLES drawn examples instead of the suite's
# few (each a landing both ways, 5-12 s), a failure shrunk to a small case (docs/testing.md).
FUZZ_EXAMPLES ?= 200
fuzz: stack-up
	KAFKA_LANDING_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest $(PYTEST_ARGS) \
		"kafka_landing_tests/integration/test_body_fuzz.py::test_every_body_lands_as_a_strict_decoder_reads_it_in_three_readers_or_is_a_dead_letter"

bench: stack-up
	$(PY) -m kafka_landing_tools.bench $(BENCH_ARGS)

# A smoke run of the benchmark: every section at small sizes, a few minutes; timings indicative only.
bench-quick: stack-up
	$(PY) -m kafka_landing_tools.bench --quick $(BENCH_ARGS)

clean: stack-down
	rm -rf .venv .venv-spark41 .jvm .local
