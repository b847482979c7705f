"""formats/spool.py: a spooled copy that changed on disk is refused (bundles read end to end:
test_load_bundles.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


async def test_a_spooled_copy_changed_on_disk_is_refused(tmp_path) -> None:
    import os

    import reader
    from reader.formats.spool import Spool

    spool = Spool([("w", 1500)])
    try:
        for piece in (b"x" * 1000, b"y" * 500):
            await spool.write("w", piece)
        spool.seal("w")
        assert b"".join([chunk async for chunk in spool.read("w", 700)]) == b"x" * 1000 + b"y" * 500
        os.pwrite(spool._file, b"Z", 1200)  # the disk gives back other bytes than were written
        with pytest.raises(reader.IntegrityError, match="changed on disk"):
            _ = [chunk async for chunk in spool.read("w", 700)]
    finally:
        spool.close()
