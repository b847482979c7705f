"""Whole models into memory: a read plan of a few large ranges, each storage read once.

selection.py the one typed Selection a load carries (its fields: the keyword-only parameters of
            every public load), and the seam to the archive (Catalog, Payloads): the loader never
            imports the archive
shards.py   (sans-IO) tensor-parallel shards: which block of which tensor a rank loads
plan.py     (sans-IO) which payload entries a selection needs, grouped into coalesced ranges
storages.py (I/O) the storages' bytes: memory-mapped locally, received in place remotely
prefault.py a fresh buffer's pages faulted in on a thread while a receive fills it
arrays.py   NumPy views of the storages with each tensor's sizes, strides and offset
load.py     Archive.load: selection -> plan -> storages -> arrays
sync.py     reader.load: the same from synchronous code, one call
"""
