"""Many tensors into memory at once (whole models, a prefix, a rank's blocks): a read plan of a few
large ranges, each storage read once. One entry's bytes on their own are `reader.entries`.

selection.py the one typed Selection a load carries (its fields: the keyword-only parameters of
            every public load), and the seam to the archive (Catalog, Payloads): the loader never
            imports the archive
shards.py   (sans-IO) tensor-parallel shards: which block of which tensor a rank loads
plan.py     (sans-IO) which payload entries a selection needs, grouped into coalesced ranges
storages.py (I/O) the storages' bytes: memory-mapped locally, received in place remotely
landing.py  each entry of a range checked on a thread as its bytes land
prefault.py a fresh buffer's pages faulted in on a thread while a receive fills it
blockplan.py (sans-IO) a rank's blocks cut, each column block's way (parts or rows) chosen by cost
blockrequests.py (sans-IO) the typed requests of those blocks: offsets trusted or predicted,
            batching, buffers; a refuted prediction planned again
blocks.py   the executor of that plan: the link timed where the choice needs it, requests sent
rowchunks.py a column block's rows read a chunk at a time
regions.py  boxes of tensors (DCP's ReadItems): whole ones as storages, the rest as blocks
arrays.py   NumPy views of the storages with each tensor's sizes, strides and offset
load.py     Archive.load: selection -> plan -> storages -> arrays
budget.py   the memory budget of everything that streams (max_buffered, PT2SERVE_MAX_BUFFERED)
readahead.py safe_open's next keys read ahead within that budget
"""
