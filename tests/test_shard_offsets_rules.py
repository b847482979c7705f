"""Where torch's ZIP writer puts each entry's data (every local header padded so data starts at a
multiple of 64) is where the reader predicts it, and the writer the offset tests use misplaces only
what it is told to. Files only, no socket; the block requests over the network are in
test_shard_offsets.py."""

from __future__ import annotations

import pathlib

import pytest

import reader
from reader.zipfmt import predicted_data_offset as predicted_offset
from testing.aligned_pt2 import ROOT, write_aligned_pt2
from testing.shard_blocks import matrix_arrays
from testing.torch_oracle import HAVE_TORCH
from testing.zipbytes import directory_of

pytestmark = pytest.mark.unit


def _data_offsets(path: pathlib.Path) -> dict[str, tuple[int, int]]:
    """Each entry's (predicted, actual) data offset."""
    data = path.read_bytes()
    _, entries = directory_of(data)
    return {
        entry.name: (predicted_offset(entry), reader.zipfmt.data_offset(entry, data[entry.header_offset :]))
        for entry in entries
    }


def test_the_prediction_is_where_torch_puts_the_data(tmp_path: pathlib.Path) -> None:
    """torch 2.13 (the module below) and the torch that wrote ../shared/fixtures/linear.pt2."""
    paths = []
    shared = pathlib.Path(__file__).resolve().parents[1] / "../shared/fixtures/linear.pt2"
    if shared.exists():
        paths.append(shared)
    if HAVE_TORCH:
        import torch

        model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.LayerNorm(5))
        path = tmp_path / "exported.pt2"
        torch.export.save(torch.export.export(model, (torch.zeros(2, 7),)), path)
        paths.append(path)
    if not paths:
        pytest.skip("neither torch nor ../shared/fixtures/linear.pt2")
    for path in paths:
        offsets = _data_offsets(path)
        assert offsets and all(predicted == actual for predicted, actual in offsets.values()), path


def test_the_writer_above_misplaces_only_what_it_is_told_to(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.pt2"
    write_aligned_pt2(path, matrix_arrays(), shifted={2})
    wrong = {name for name, (predicted, actual) in _data_offsets(path).items() if predicted != actual}
    assert wrong == {f"{ROOT}/data/weights/weight_2"}
