"""What kvtui reads and writes, typed.

- scenario/: scenario files (TOML): the schema, defaults, validation with file/line/field errors.
  Below the core, which reads the scenario's typed settings.
- snapshot/: the snapshot, a run as stored: its typed documents and its file format (a floor
  package).
- records.py, records_cols.py: the per-request records file (JSON lines, and the columnar archive).
  Beside the runtime: they write the core's Record (kvtui.core.record).

This folder only groups them; its __init__ imports nothing.
"""
