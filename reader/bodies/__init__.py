"""Bodies: one thing's bytes out of an archive, each with `length`, `read` and `chunks(start, end)`.

What the service, the CLI, the formats and the statistics hold instead of a name; each is checked
once when made (readable, how long its output is) and its reads are checked as the CRC-32 allows.

tensor.py        TensorBytes: one tensor in one order ("default" or "contiguous"); `Order`
tensor_slice.py  SliceBytes: `full[index]` of a tensor, reading only the byte runs it covers
gathered.py      a non-dense view's or a slice's bytes a chunk at a time: only the bytes asked for are
                 built, whatever size the view declares
entry.py         EntryBytes: one whole archive entry (the ExecuTorch programs an archive carries)
verified.py      whole-entry reads, and the stored entries of a local archive whose CRC-32 passed
                 once (read again without the pass; `verify_ahead` checks them in the background)
"""

from .entry import EntryBytes
from .tensor import Order, TensorBytes
from .tensor_slice import SliceBytes
from .verified import verify_ahead

__all__ = ["EntryBytes", "Order", "SliceBytes", "TensorBytes", "verify_ahead"]
