"""Our .ptd files, checked in-process: no socket, no subprocess. The checks that need ExecuTorch's
own reader are in test_ptd_format.py."""

from __future__ import annotations

import pytest

import reader
from reader.formats.ptd import HEADER, plan_ptd, ptd_refusal
from testing.checks import run
from testing.paths import ARCHIVES
from testing.ptd_files import ptd_bytes

pytestmark = pytest.mark.unit


def test_ptd_header_fields() -> None:
    blob, _ = run(ptd_bytes(ARCHIVES / "two_models.pt2", "encoder"))
    magic, length, fb_offset, fb_size, segment_base, segment_size = HEADER.unpack_from(blob, 8)
    assert blob[4:8] == b"FT01" and magic == b"FH01" and length == 40
    assert fb_offset == 48 and segment_base >= fb_offset + fb_size and segment_base % 128 == 0
    assert len(blob) == segment_base + segment_size


def test_ptd_tied_weights_share_one_segment() -> None:
    async def plan():
        async with reader.open_archive(ARCHIVES / "layouts.pt2") as ar:
            return plan_ptd([t for t in ar.tensors() if not ptd_refusal(t)])

    result = run(plan())
    by_name = {e.info.name: e for e in result.entries}
    assert by_name["lin1.weight"].segment == by_name["lin2.weight"].segment
    assert len(result.segments) == len(result.entries) - 1
    # view_a and view_b view one storage at different offsets: two segments
    assert by_name["view_a"].segment != by_name["view_b"].segment


def test_ptd_refuses_what_executorch_cannot_hold() -> None:
    async def plan(names):
        async with reader.open_archive(ARCHIVES / "dtypes.pt2") as ar:
            return plan_ptd([ar.layout(name) for name in names])

    with pytest.raises(reader.UnsupportedPayload, match=r"t_complex64 \(dtype complex64") as caught:
        run(plan(["weight", "t_complex64", "t_float8_e8m0fnu"]))
    assert "t_float8_e8m0fnu" in str(caught.value) and "weight" not in str(caught.value).split(":")[1]


@pytest.mark.parametrize("alignment", [0, 3, 100, 4, 1 << 21])
def test_ptd_alignment_must_be_a_sane_power_of_two(alignment: int) -> None:
    with pytest.raises(ValueError, match="alignment"):
        plan_ptd([], alignment)


def test_ptd_of_no_tensors_is_a_valid_empty_file() -> None:
    plan = plan_ptd([])
    assert plan.segments == () and plan.length == len(plan.head) and plan.length % 128 == 0
