"""The HTTP transport: the load a live step sends, and what came back.

generator.py runs a step on worker processes (worker.py): it sums their statuses (protocol.py) and
lets the core (kvtui.core.phases) say when the warm-up ends and the window closes. client.py streams
each request and times it; workload.py makes the prompts and lengths; autoscale.py adds workers
when one nears its capacity. Every request comes back as a kvtui.core.record.Record, which the run
appends to the records file (kvtui.io.records).

Imports: kvtui.core, kvtui.io.scenario and the floor (never the run controller above it).
"""
