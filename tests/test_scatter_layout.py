"""sources/transport/scatter.py and multirange.layout on their own: a scatter filled in any steps, a layout
predicted from the first head, gathered runs (against servers: test_multirange_scatter.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from reader.sources.transport import multirange
from reader.sources.transport.scatter import Scatter, gather

SIZE = 4 << 20
DATA = np.random.default_rng(34).integers(0, 256, SIZE, dtype=np.uint8).tobytes()

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("step", [1, 3, 7, 10, 64])
def test_a_scatter_filled_in_any_steps_puts_each_byte_in_its_place(step: int) -> None:
    sizes = [5, 1, 0, 12, 30]
    buffers = [memoryview(bytearray(size)) for size in sizes]
    scatter = Scatter(buffers)
    data = bytes(range(sum(sizes)))
    for at in range(0, len(data), step):  # half written through free() and advance(), half copied in
        piece = data[at : at + step]
        if at // step % 2:
            scatter.write(piece)
            continue
        while piece:
            free = scatter.free()
            free[: min(len(free), len(piece))] = piece[: len(free)]
            scatter.advance(min(len(free), len(piece)))
            piece = piece[len(free) :]
    assert b"".join(bytes(buffer) for buffer in buffers) == data
    assert scatter.filled == scatter.size == len(data) and len(scatter.free()) == 0
    with pytest.raises(ValueError, match="past the end"):
        scatter.write(b"x")
    with pytest.raises(ValueError, match="past the end"):
        scatter.advance(1)


def test_the_layout_predicted_from_the_first_head_is_that_of_the_whole_answer() -> None:
    """Ranges whose offsets cross 10, 100 and 1000: heads of several lengths, each where it is."""
    asked = [(0, 9), (9, 10), (12, 99), (99, 1000), (1000, 1001), (4000, 5000)]
    head = b"\r\n--B\r\nContent-Type: a/b%%\r\nContent-Range: bytes %d-%d/5000\r\n\r\n"
    parts = [(head % (start, end - 1), DATA[start:end]) for start, end in asked]
    body = b"".join(h + data for h, data in parts) + b"\r\n--B--\r\n"
    laid = multirange.layout(body[: multirange.HEAD_WINDOW], b"B", asked, 5000)
    assert laid is not None and laid.length == len(body) and laid.check(memoryview(body))
    assert laid.frame == b"".join(h for h, _ in parts) + b"\r\n--B--\r\n"
    assert [body[at : at + size] for at, size in zip(laid.starts.tolist(), laid.sizes.tolist())] == [
        data for _, data in parts
    ]
    assert multirange.layout(body[:30], b"B", asked, 5000) is None  # the first head not in sight
    assert multirange.layout(body, b"B", [(0, 8), *asked[1:]], 5000) is None  # another range named
    for at in laid.starts.tolist():  # a byte of any head changed: not this layout
        wrong = bytearray(body)
        wrong[at - 3] ^= 1
        assert not laid.check(memoryview(wrong))


@pytest.mark.parametrize("seed", range(20))
def test_gathered_runs_are_those_a_loop_copies(seed: int) -> None:
    """Runs of one size at one step (copied as one) and irregular ones, into buffers of whole runs."""
    rng = np.random.default_rng(seed)
    source = rng.integers(0, 256, 20_000, dtype=np.uint8)
    sizes = np.repeat(rng.integers(0, 40, 6), rng.integers(1, 12, 6))  # stretches of one size
    gaps = np.repeat(rng.integers(0, 30, 6), rng.integers(1, 12, 6))[: len(sizes)]
    gaps = np.pad(gaps, (0, len(sizes) - len(gaps)), constant_values=7)
    starts = np.cumsum(np.concatenate([[5], (sizes + gaps)[:-1]]))
    cuts = sorted(rng.choice(np.arange(1, len(sizes)), min(3, len(sizes) - 1), replace=False).tolist())
    ends = np.cumsum(sizes).tolist()
    bounds = [0, *(ends[cut - 1] for cut in cuts), ends[-1]]
    into = [memoryview(bytearray(high - low)) for low, high in itertools.pairwise(bounds)]
    gather(source, starts, sizes, into)
    want = b"".join(source[start : start + size].tobytes() for start, size in zip(starts, sizes))
    assert b"".join(bytes(buffer) for buffer in into) == want
    with pytest.raises(ValueError, match="buffers"):
        gather(source, starts, sizes, [memoryview(bytearray(len(want) + 1))])
    with pytest.raises(ValueError, match="outside"):
        gather(source, starts + 20_000, sizes, into)
