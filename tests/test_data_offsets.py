"""Where each entry's data starts, owned by one object (reader/entries/offsets.py): confirmed from a
local header, predicted by torch's layout rule until a header refutes a prediction."""

from __future__ import annotations

import pytest

from reader.entries.offsets import DataOffsets
from reader.zipfmt import ZipEntry, predicted_data_offset
from reader.zipfmt.structs import METHOD_STORED

pytestmark = pytest.mark.unit


def _entry(name: str, header_offset: int, size: int = 4096) -> ZipEntry:
    raw = name.encode()
    return ZipEntry(
        name, raw, 0, METHOD_STORED, 0, size, size, header_offset, header_offset + size + 256, "stored"
    )


A, B = _entry("archive/data/0", 0), _entry("archive/data/1", 8192)


def test_an_entry_is_predicted_until_its_header_confirms_it_and_never_after() -> None:
    offsets = DataOffsets()
    assert offsets.known(A.name) is None and A.name not in offsets
    assert offsets.predict(A) == predicted_data_offset(A)
    assert offsets.settle(A, predicted_data_offset(A))  # the prediction held
    assert offsets.known(A.name) == predicted_data_offset(A) and A.name in offsets
    assert offsets.predict(A) is None  # confirmed: never predicted again
    assert offsets.predicting and offsets.predict(B) == predicted_data_offset(B)


def test_a_refuted_prediction_ends_predicting_for_the_archive() -> None:
    offsets = DataOffsets()
    found = predicted_data_offset(A) + 64
    assert not offsets.settle(A, found)
    assert offsets.known(A.name) == found
    assert not offsets.predicting and offsets.predict(B) is None


def test_an_archive_is_written_as_torch_does_while_its_confirmed_offsets_are_where_predicted() -> None:
    entries = {A.name: A, B.name: B}
    assert not DataOffsets().written_as_torch_does(entries)  # nothing confirmed: nothing to go by
    assert not DataOffsets({A.name: predicted_data_offset(A)}).written_as_torch_does(None)
    assert DataOffsets({A.name: predicted_data_offset(A)}).written_as_torch_does(entries)
    assert not DataOffsets({A.name: predicted_data_offset(A) + 64}).written_as_torch_does(entries)
    offsets = DataOffsets({A.name: predicted_data_offset(A)})
    offsets.refute()
    assert not offsets.written_as_torch_does(entries)


def test_the_offsets_are_the_caller_s_own_copy() -> None:
    given = {A.name: 100}
    offsets = DataOffsets(given)
    offsets.confirm(B.name, 200)
    assert given == {A.name: 100} and offsets.known(B.name) == 200
