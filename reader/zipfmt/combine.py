"""The CRC-32 of two byte strings joined, from their own CRC-32s (zlib's `crc32_combine`).

A body received on a thread has each buffer's CRC-32 taken there, while the bytes are still in
that core's cache; an entry's CRC-32 is then these values joined in order, with no second pass over
the bytes. ISA-L exposes the combination; the standard library's zlib does not, so this is zlib's
own algorithm (crc32.c: polynomial products modulo the CRC's polynomial, reflected), for the
fallback. A join costs a few dozen steps per set bit of the length.
"""

from __future__ import annotations

POLY = 0xEDB88320  # the CRC-32 polynomial, reflected


def _multiply(a: int, b: int) -> int:
    """a * b modulo the polynomial (both reflected: bit 31 is x^0)."""
    product = 0
    mask = 1 << 31
    while True:
        if a & mask:
            product ^= b
            if not a & (mask - 1):
                return product
        mask >>= 1
        b = (b >> 1) ^ POLY if b & 1 else b >> 1


def _powers() -> list[int]:
    """x^(2^k) modulo the polynomial, k = 0..31."""
    powers = [1 << 30]  # x^1
    for _ in range(31):
        powers.append(_multiply(powers[-1], powers[-1]))
    return powers


_X2N = _powers()


def _x8n(length: int) -> int:
    """x^(8 * length) modulo the polynomial: appending `length` zero bytes."""
    power, k = 1 << 31, 3  # x^0; 8 * length = length << 3
    while length:
        if length & 1:
            power = _multiply(_X2N[k & 31], power)
        length >>= 1
        k += 1
    return power


def crc32_combine(first: int, second: int, second_length: int) -> int:
    """The CRC-32 of A + B, given crc32(A), crc32(B) and len(B)."""
    return _multiply(_x8n(second_length), first) ^ (second & 0xFFFFFFFF)
