"""Column blocks read a chunk of rows at a time: where one range a request means reading the rows a
block lies in (S3, any HTTP server without multi-range answers, a local file), each chunk of rows is
gathered into the block as it lands, so a rank holds its share and a few scratch buffers, never the
rows it read. The chunking on its own, without a server (a local file); from S3 and HTTP servers:
test_shard_chunks_remote.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from reader.loading import rowchunks
from reader.pt2 import slicing, strided
from reader.sources.spans import COALESCE_GAP
from testing.strided_views import numpy_view as _full
from testing.strided_views import tensor_info as _info
from testing.strided_views import views_and_indices

pytestmark = pytest.mark.unit

# -- sans-IO: the chunks of rows and their gather -----------------------------------------------------


@settings(max_examples=600, deadline=None)
@given(views_and_indices())
def test_chunks_of_rows_gathered_make_the_slice(case) -> None:
    sizes, strides, offset, index = case
    end = strided.element_extent(sizes, strides, offset)[1]
    storage = np.arange(max(end, offset + 1) + 3, dtype=np.float32)
    info = _info(sizes, strides, offset, len(storage))
    try:
        want = np.ascontiguousarray(_full(storage, info)[index]).tobytes()
    except (IndexError, TypeError, ValueError):
        return
    plan = slicing.plan_slice(info, index, 1 << 30)  # every gap read through: one run
    raw = storage.tobytes()
    for limit in (1, 40, 1000, 1 << 30):
        chunks = rowchunks.row_chunks(plan, limit)
        if chunks is None:
            continue
        low, high = plan.runs[0]
        run = np.frombuffer(raw[low:high], np.uint8)
        into = np.full(plan.nbytes, 0xEE, np.uint8)
        assert chunks.rows[0][0] == 0 and chunks.rows[-1][1] == plan.shape[0]
        for (first, last), (after, _) in zip(chunks.rows, (*chunks.rows[1:], (plan.shape[0], 0))):
            assert first < last == after  # the chunks cover every row once, in order
            start = chunks.first + first * chunks.step
            length = (last - first - 1) * chunks.step + chunks.span
            assert start >= 0 and start + length <= len(run)  # a piece never reads past its run
            assert length <= max(limit, chunks.span)  # at most the limit, or one row
            rows = into[first * chunks.row_bytes : last * chunks.row_bytes]
            rowchunks.gather_rows(plan, chunks, run[start : start + length], rows)
        assert into.tobytes() == want


def test_a_column_block_comes_in_chunks_of_the_limit() -> None:
    info = _info((1000, 1024), (1024, 1), 0, 1000 * 1024)
    plan = slicing.plan_slice(info, np.s_[:, 256:512], COALESCE_GAP)
    assert len(plan.runs) == 1
    chunks = rowchunks.row_chunks(plan, 100 * 4096)
    assert chunks is not None
    assert (chunks.step, chunks.span, chunks.row_bytes) == (4096, 1024, 1024)
    assert chunks.rows[:2] == ((0, 100), (100, 200)) and len(chunks.rows) == 10


def test_rows_that_interleave_are_not_chunked() -> None:
    # a transposed view: the block's rows are columns of storage, each spanning the whole payload
    info = _info((1024, 1000), (1, 1024), 0, 1000 * 1024)
    plan = slicing.plan_slice(info, np.s_[:, 0:500], 1 << 30)
    assert rowchunks.row_chunks(plan, 1 << 20) is None


# -- loads: the right bytes, and memory bounded by the share ------------------------------------------
