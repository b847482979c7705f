"""Response header fields in their wire form: what Starlette's `init_headers` makes of a mapping,
made once for the fields a service sends with many answers."""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class Fields(Mapping[str, str]):
    """Response header fields sent with many answers (read-only), with their wire form made once:
    `raw`, lower-case names and values in Latin-1, as ASGI sends them."""

    __slots__ = ("_fields", "raw")

    def __init__(self, fields: Mapping[str, str]) -> None:
        self._fields = dict(fields)
        self.raw = tuple(encoded(self._fields))

    def __getitem__(self, name: str) -> str:
        return self._fields[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"Fields({self._fields!r})"


def encoded(fields: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    """What Starlette's init_headers makes of these fields."""
    if isinstance(fields, Fields):
        return list(fields.raw)
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in fields.items()]
