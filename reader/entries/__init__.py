"""One entry's bytes over a byte source: the archive's directory opened, each entry read.

opening.py     the open policy: a source to an archive's index in as few reads as it takes
fetcher.py     EntryFetcher: entry contents (local headers checked, ranges, inflate, CRC-32),
               streamed or read whole
batched.py     several ranges of entries at once: close ones in one request, headers included
offsets.py     (sans-IO) DataOffsets: where each entry's data starts, confirmed or predicted
ranges.py      (sans-IO) byte ranges coalesced (a gap costs less than a round trip), and checked
running_crc.py an entry's CRC-32 taken on a worker thread while its next bytes arrive
nested.py      ZIP archives stored inside an entry (AOTInductor's pickle_weights files)
budget.py      MetadataBudget: one cap on an archive's decompressed metadata, across its entries

Many tensors into memory at once is `reader.loading`, built on these.
"""
