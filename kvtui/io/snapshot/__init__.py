"""The snapshot: what a run is, as stored (kvtui.snapshot/1). A floor package: it imports only the floor.

    schema     the documents (run, mode, step, prediction, quality, replica…), typed, with the version
    document   the machinery under them: typed fields over a JSON object, unknown keys kept
    file       the file format: writer, journal, reader, salvage of a cut-short file
    outclaim   a run's --out belongs to one run only
    docs       docs/SNAPSHOT.md, generated from the schema's field docs
"""
