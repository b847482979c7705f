"""Property-based fuzzing of the reader, bounded for CI (derandomized, so every run is the same).

For any bytes, opening an archive and reading every tensor (both orders, stream, read_many,
read_numpy) succeeds or raises a ReaderError; the sans-IO zipfmt functions raise only
ArchiveFormatError / IntegrityError; a mutated archive never hands out wrong bytes for a tensor
whose payload, configs and headers were left alone; generated tensors read back as a plain
Python gather says. The generators and oracles live in fuzz/the fuzz modules, shared with the
long-run harness fuzz/fuzz_reader.py.
"""

from __future__ import annotations

import tracemalloc
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fuzz import bases, bounds, choices, mutators, oracles

pytestmark = pytest.mark.unit

BASES = sorted(bases.all_bases())
BOUNDED = settings(
    derandomize=True,
    database=None,
    deadline=timedelta(seconds=2),  # "well under a second" per input, with room for slow CI
    phases=[Phase.explicit, Phase.generate],  # no shrinking: failures print the input's recipe
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PEAK_BYTES = 256 << 20  # inputs are at most ~35 KiB; no read should need more than this


def _check(case: mutators.Case) -> None:
    with bounds.memory_cap():
        oracles.check_case(case)


@pytest.mark.parametrize("base", BASES)
@settings(BOUNDED, max_examples=25)
@given(data=st.data())
def test_mutated_archives(base: str, data: st.DataObject) -> None:
    """Flips, boundary values in header fields, inserts, deletes, cuts, splices, junk."""
    _check(mutators.mutate(choices.HypothesisChoices(data), base))


@settings(BOUNDED, max_examples=120)
@given(
    base=st.sampled_from(BASES),
    slot=st.integers(0, 10_000),
    value=st.sampled_from(mutators.BOUNDARY) | st.integers(0, 2**64 - 1),
    past_end=st.integers(-2, 70_000),
)
def test_header_fields_with_boundary_values(base: str, slot: int, value: int, past_end: int) -> None:
    """Every integer field of every ZIP record: 0, 1, 0xFFFF, 0xFFFFFFFF, 2**63-1, beyond the file."""
    mapped = bases.base_map(base)
    at, width = mapped.slots[slot % len(mapped.slots)]
    if past_end != -2:
        value = len(mapped.data) + past_end
    data = bytearray(mapped.data)
    data[at : at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
    what = f"{base}: field@{at}/{width}={value:#x}"
    _check(mutators.Case(bytes(data), what, base, set(range(at, at + width))))


@settings(BOUNDED, max_examples=60)
@given(base=st.sampled_from(BASES), other=st.sampled_from(BASES), cut=st.floats(0, 1), at=st.floats(0, 1))
def test_truncated_and_spliced(base: str, other: str, cut: float, at: float) -> None:
    """The start of one archive followed by the end of another (or nothing: truncation)."""
    first, second = bases.all_bases()[base], bases.all_bases()[other]
    head = first[: int(len(first) * cut)]
    tail = second[int(len(second) * at) :] if other != base else b""
    _check(mutators.Case(head + tail, f"{base}[:{len(head)}] + {other}[-{len(tail)}:]"))


@settings(BOUNDED, max_examples=250)
@given(data=st.data())
def test_generated_configs(data: st.DataObject) -> None:
    """Valid ZIPs with generated PT2 configs: wrong types, huge/negative sizes, as_expr, unknown
    dtypes, deep nesting, many dims; whatever reads must match a plain Python gather."""
    case = mutators.generate_config_archive(choices.HypothesisChoices(data))
    tracemalloc.start()
    try:
        _check(case)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"{case.what}: peak allocation {peak} bytes"


@settings(BOUNDED, max_examples=150)
@given(data=st.data())
def test_zipfmt_sans_io(data: st.DataObject) -> None:
    """locate_directory, parse_central_directory, data_offset, EntryDecoder, called as documented."""
    ch = choices.HypothesisChoices(data)
    if choices.chance(ch, 4):
        case = mutators.Case(data.draw(st.binary(max_size=512)), "random bytes")
    else:
        case = mutators.mutate(ch, choices.pick(ch, BASES))
    with bounds.memory_cap():
        oracles.exercise_zipfmt(case.data, ch)


def test_unmodified_bases_read_back() -> None:
    """The oracle's baseline: every base archive opens and most tensors read."""
    for name in BASES:
        good = bases.base_map(name).good
        assert "open" not in good, name
        assert any(isinstance(value, bytes) for value in good.values()), name
