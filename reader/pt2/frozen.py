"""Bulk construction of frozen slots dataclasses.

A frozen dataclass's generated __init__ sets every field through
object.__setattr__, which dominates building the thousands of TensorInfo an open
makes. `fast_constructor` returns a function taking every field positionally that
sets the slots through their member descriptors instead: the same frozen object
(equal, hashable, immutable afterwards), built about twice as fast. Generated the
way dataclasses generates __init__, so there is no per-field loop at run time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def fast_constructor(cls: type[T]) -> Callable[..., T]:
    """build(field_1, ..., field_n) -> cls, for a dataclass declared with slots=True."""
    names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    lines = [f"def build({', '.join(names)}):", "    obj = new(cls)"]
    for position, name in enumerate(names):
        namespace[f"set_{position}"] = cls.__dict__[name].__set__
        lines.append(f"    set_{position}(obj, {name})")
    lines.append("    return obj")
    exec("\n".join(lines), namespace)  # generated from the field names, as dataclasses does
    build = namespace["build"]
    build.__qualname__ = build.__name__ = f"build_{cls.__name__}"
    return build
