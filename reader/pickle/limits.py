"""Bounds that keep hostile pickles cheap: every loop and allocation is capped by these."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps on one pickle. The defaults are far above what torch.save writes (a state dict
    of 10,000 tensors is about 1 MiB of pickle and 200,000 opcodes)."""

    max_input_bytes: int = 64 << 20
    max_opcodes: int = 8_000_000
    max_stack: int = 1_000_000  # values on the stack, all marks together
    max_marks: int = 1_000  # nested MARKs
    max_memo: int = 1_000_000
    max_string_bytes: int = 16 << 20  # one str/bytes value
    max_int_bytes: int = 32  # LONG1/LONG4 payloads and text INT/LONG digits / 2
    max_line_bytes: int = 512  # text opcodes (GLOBAL names, INT, FLOAT, GET/PUT)
    max_walk: int = 2_000_000  # values visited when turning the result into tensors
    max_depth: int = 500  # containers nested inside each other, when walked
    max_name_chars: int = 64 << 20  # characters of all the names a walk builds


DEFAULT_LIMITS = Limits()
