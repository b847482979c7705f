"""The opened archives: what `reader.open_archive` returns and what it is built from.

archive.py         Archive: one opened archive; tensors by name, read in either order, loaded
archive_like.py    ArchiveLike: the Protocol Archive and ShardedArchive both satisfy (the members
                   a user needs, each documented once); SourceLike
reads.py           TensorReads: a tensor by name looked up and read, the same for both kinds
source_backed.py   SourceBacked: stats, revalidate, close and `async with` of an archive over its source
deprecated.py      the old positional order and the members that go, kept one release with a warning
opener.py          open_archive: a location to an ArchiveLike, through the local cache when set
sharded/           ShardedArchive: a sharded checkpoint's index and shards as one archive

The names are public from `reader` (reader.Archive, reader.ArchiveLike, reader.ShardedArchive,
reader.open_archive); these modules are where they live.
"""
