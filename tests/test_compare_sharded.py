"""reader.compare takes a sharded checkpoint (`*.bin.index.json` and its shards) on either side: the
same rules as for one archive, each tensor read from the shard that holds it."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import reader
from testing.checks import run
from testing.fixtures.make_sharded import small_gpt_state_dict, write_sharded

pytestmark = pytest.mark.unit
torch = pytest.importorskip("torch")

# small tensors in different shards (batched per shard), in float32 and bf16, and a tied pair
CHANGED = ("transformer.h.0.ln_1.weight", "transformer.h.2.mlp.c_fc.weight", "transformer.ln_f.weight")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """The sharded checkpoint, a copy with CHANGED edited (the rest byte for byte), and the same
    state dict in one torch.save file."""
    root = tmp_path_factory.mktemp("compare-sharded")
    state = small_gpt_state_dict()
    original = write_sharded(root / "v1", state)
    torch.save(state, root / "whole.pt")
    edited = dict(state)
    for name in CHANGED:
        edited[name] = state[name].clone()
        edited[name].view(-1)[1] += 0.5
    return original, write_sharded(root / "v2", edited), root / "whole.pt"


async def _compare(path_a: pathlib.Path, path_b: pathlib.Path, *, exact: bool = False):
    async with reader.open_archive(path_a) as a, reader.open_archive(path_b) as b:
        diff = await reader.compare(a, b, exact=exact)
        values = {}
        for name in CHANGED:
            values[name] = (await a.read_numpy(name), await b.read_numpy(name))
        return diff, a, b, values


def test_a_sharded_checkpoint_against_itself_is_same_without_reading_data(checkpoints):
    original, _, _ = checkpoints
    diff, a, _, _ = run(_compare(original, original))
    assert isinstance(a, reader.ShardedArchive)
    assert diff.identical and len(diff.tensors) == len(small_gpt_state_dict())
    assert {t.proof for t in diff.tensors} == {"crc32"}
    assert diff.to_dict()["summary"]["bytes_read"] == {"a": 0, "b": 0}


def test_a_changed_copy_shows_those_tensors_changed_with_their_figures(checkpoints):
    original, changed, _ = checkpoints
    diff, a, _, values = run(_compare(original, changed))
    assert len({a.shard_of(name) for name in CHANGED}) > 1  # the changes lie in several shards
    verdicts = {t.name: t for t in diff.tensors if t.status != "same"}
    assert sorted(verdicts) == sorted(CHANGED)
    for name in CHANGED:
        x, y = (np.asarray(v, dtype=np.float64) for v in values[name])
        figures = verdicts[name].figures
        assert verdicts[name].status == "changed" and figures.elements_differ == 1 and not figures.sampled
        assert figures.max_abs_diff == pytest.approx(float(np.abs(x - y).max()), rel=1e-9)
        assert figures.relative_l2 == pytest.approx(np.linalg.norm(x - y) / np.linalg.norm(x), rel=1e-9)
    summary = diff.to_dict()["summary"]
    assert summary["counts"]["changed"] == len(CHANGED) and summary["counts"]["same"] == len(diff.tensors) - 3
    assert summary["bytes_read"]["a"] > 0 and summary["bytes_read"]["b"] > 0


def test_a_sharded_checkpoint_against_one_file_of_the_same_state_dict(checkpoints):
    """Either side may be sharded: the same storages' bytes are proven the same by their CRC-32s."""
    original, changed, whole = checkpoints
    diff, a, b, _ = run(_compare(whole, original))
    assert isinstance(a, reader.Archive) and isinstance(b, reader.ShardedArchive)
    assert diff.identical and {t.proof for t in diff.tensors} == {"crc32"}
    diff, _, _, _ = run(_compare(changed, whole))
    assert sorted(t.name for t in diff.tensors if t.status != "same") == sorted(CHANGED)
