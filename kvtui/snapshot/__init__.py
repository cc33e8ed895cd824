"""The snapshot: what a run is, as stored (kvtui.snapshot/1). A floor package: it imports only the floor.

    file       the file format: writer, journal, reader, salvage of a cut-short file
    outclaim   a run's --out belongs to one run only
"""
