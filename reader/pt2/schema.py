"""The payload configs' JSON, as torch writes it (torch._export.serde.schema), as msgspec Structs.

`<model>_weights_config.json` / `<model>_constants_config.json` map every FQN to
a PayloadMeta. msgspec decodes them straight into these Structs and checks the
types on the way (in C: a bool or 1.0 is not an int, a string is not a list),
so payload_meta only checks what types cannot say. Unknown fields are ignored,
as torch's own reader does, so newer writers still load.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ..errors import ArchiveFormatError

# No real tensor spans more than this; larger claims are corrupt (or hostile). The limit
# holds for the product of the non-zero sizes too, so numpy can always shape the result.
MAX_TENSOR_BYTES = 1 << 50
# torch and numpy both stop at 64 dimensions; more is a corrupt (or hostile) config.
MAX_NDIM = 64
STRIDED_LAYOUT = 7  # torch._export.serde.schema.Layout.Strided

Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_TENSOR_BYTES)]

# gc=False on every Struct: they hold only numbers, strings, lists and each other, so they
# cannot form cycles, and the collector need not track the thousands an open decodes.


class SymInt(msgspec.Struct, gc=False):
    """A union in torch's schema: a concrete `as_int`, or a symbolic `as_expr`."""

    as_int: Count | None = None
    as_expr: msgspec.Raw = msgspec.Raw()  # kept undecoded; empty when absent


Dims = Annotated[list[SymInt], msgspec.Meta(max_length=MAX_NDIM)]


class TensorMeta(msgspec.Struct, gc=False):
    dtype: int  # torch._export.serde.schema.ScalarType
    sizes: Dims
    strides: Dims
    storage_offset: SymInt
    requires_grad: bool
    layout: int = STRIDED_LAYOUT


class PayloadMeta(msgspec.Struct, gc=False):
    path_name: str  # the payload's file name in data/weights/ or data/constants/
    is_param: bool
    use_pickle: bool
    tensor_meta: TensorMeta | None = None  # None: a custom object, not a tensor


class PayloadConfig(msgspec.Struct, gc=False):
    config: dict[str, PayloadMeta]


_DECODER = msgspec.json.Decoder(PayloadConfig)


def decode_payload_config(raw: bytes, name: str) -> dict[str, PayloadMeta]:
    """The FQN → PayloadMeta map of one config entry; ArchiveFormatError naming the bad field."""
    try:
        return _DECODER.decode(raw).config
    except msgspec.ValidationError as exc:
        raise ArchiveFormatError(f"{name}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ArchiveFormatError(f"{name}: not valid JSON ({exc})") from None
    except RecursionError:  # msgspec stops at Python's recursion limit, even in skipped fields
        raise ArchiveFormatError(f"{name}: JSON nested too deeply") from None
