"""The pickle reader's errors, each a ReaderError callers already map.

A pickle that asks for something this reader will not do (a global outside the
allowlist, an opcode that builds arbitrary objects) is a refusal, not a
malformed file: UnsupportedPayload. Bytes that are not a well-formed pickle, or
that exceed a limit, are ArchiveFormatError.
"""

from __future__ import annotations

from ..errors import ArchiveFormatError, UnsupportedPayload


class ForbiddenGlobal(UnsupportedPayload):
    """The pickle names a global (module.name) outside the allowlist; nothing was imported."""


class ForbiddenOpcode(UnsupportedPayload):
    """The pickle uses an opcode that would build or call arbitrary objects."""


class ForbiddenCall(UnsupportedPayload):
    """REDUCE/BUILD on something the allowlist does not let be called or updated."""


class MalformedPickle(ArchiveFormatError):
    """The bytes are not a well-formed pickle (or not the shape torch.save gives it)."""


class PickleLimitExceeded(MalformedPickle):
    """The pickle exceeds a size, count or depth limit (see reader.pickle.Limits)."""
