"""`make bench`: what landing costs at sizes where throughput, not start-up, dominates, side by
side with the alternatives, and whether the goals are met, measured in one run.

A case is one section of the report and one module (`cases.CASES` lists them in the order a
full run measures them); each runs alone too:

    python -m kafka_landing_tools.bench                        # every case; a full run writes docs/benchmark.md
    python -m kafka_landing_tools.bench --quick                # a smoke run: small sizes, docs untouched
    python -m kafka_landing_tools.bench --case warehouse_load  # one case (the data it needs, then its jobs)
    python -m kafka_landing_tools.bench.warehouse_load --quick # the same, from the case's own module

The rest: `data` makes the records and topics, `stack` is what the run stands on (the local
stack, a Connect server of a case's own), `world` the run's hours, roots and topics, `measure`
runs each measurement in a fresh process and reads its peak memory, `run` puts the cases
together, `goals` judges them and `report` writes the Markdown.
"""
