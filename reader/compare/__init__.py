"""Compare two open archives (each an `Archive` or a `ShardedArchive`): per name `same`, `changed`
(with figures), `added`, `removed`, `retyped` or `moved`, reading only what the metadata cannot decide.

The order of proof, cheapest first:

1. names only in one archive are `added` or `removed`, unless an added name holds the bytes of a
   removed one (same dtype and shape; proven by CRC-32 + size + view, else by SHA-256): `moved`;
2. a different dtype or shape is `retyped` (nothing read);
3. the same payload CRC-32 and size and the same view of it (strides, offset) is `same` with
   `proof: "crc32"`, nothing read (the one rule the whole service uses for "unchanged");
4. otherwise both tensors' SHA-256 decide (`proof: "sha256"`), from the digest cache when known,
   else computed in the same streamed pass that takes the figures, so a changed tensor is read
   once per side. A tensor above `sample_above` bytes is first compared on evenly spaced blocks:
   if they differ, it is `changed` and its figures are over those blocks (`sampled: true`), with
   no full read; if they agree, the full pass decides. `exact=True` always takes the full pass.

One job per module:

- model.py: the frozen records returned (`TensorDiff`, `Comparison`) and their JSON;
- numerics.py: `Figures` and the pure functions that fold two arrays into them (what the figures
  mean is written there);
- plan.py: the policy, sans-IO: names paired and decided from metadata, the rest scheduled as
  batches of small tensors or single large ones (sampled or streamed);
- aligned.py: two tensors' byte streams in aligned pieces of whole elements;
- runner.py: `compare` itself, running the plan's jobs in one `asyncio.TaskGroup` under a
  semaphore, each job returning its verdicts.
"""

from __future__ import annotations

from .model import STATUSES, Comparison, TensorDiff, module_of
from .numerics import Figures
from .runner import Progress, compare

__all__ = ["STATUSES", "Comparison", "Figures", "Progress", "TensorDiff", "compare", "module_of"]
