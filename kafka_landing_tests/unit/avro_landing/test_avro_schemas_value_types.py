"""The schemas the value-fidelity property generates (integration/test_value_fidelity) are ones
landing accepts: they parse, pass check_landable, and fastavro writes their raw bodies. Pure."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings

from kafka_landing.avro_landing.avro_schemas import parse
from kafka_landing_tests.integration.test_value_fidelity import body, schema_and_records


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=schema_and_records())
def test_generated_schemas_parse_and_their_records_encode(case):
    schema, records = case
    assert parse(json.dumps(schema)) == schema
    for r in records:
        assert body(schema, r)
