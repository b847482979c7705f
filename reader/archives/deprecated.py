"""What the archives' surface keeps for one release while callers move to its one parameter order.

Every read of an archive takes what it reads first (`name`, or `names`), then where the bytes go
(`buffer`), and everything else by keyword (`model=`, `order=`, `index=`, ...). Calls written for the
old order, which passed `model` and `order` by position, still work through `keyword_only`, with a
DeprecationWarning that names the keywords to write; `inspect.signature` shows the new order.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def keyword_only(*old: str) -> Callable[[F], F]:
    """A method whose parameters `old` (in the order the old surface took them by position) are
    keyword-only now, still taking them by position for one release, with a DeprecationWarning."""

    def wrap(function: F) -> F:
        parameters = inspect.signature(function).parameters.values()
        taken = sum(1 for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD)

        def moved(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
            extra = args[taken:]
            if len(extra) > len(old):
                raise TypeError(f"{function.__qualname__}() takes {taken + len(old)} positional arguments")
            names = old[: len(extra)]
            warnings.warn(
                f"{function.__qualname__}(): pass {', '.join(f'{n}=' for n in names)} by keyword; "
                "taking them by position ends with the next release",
                DeprecationWarning,
                stacklevel=3,
            )
            for name, value in zip(names, extra):
                if name in kwargs:
                    raise TypeError(f"{function.__qualname__}() got multiple values for {name!r}")
                kwargs[name] = value
            return args[:taken]

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def shim_async(*args: Any, **kwargs: Any) -> Any:
                if len(args) > taken:
                    args = moved(args, kwargs)
                return await function(*args, **kwargs)

            return shim_async  # type: ignore[return-value]

        @functools.wraps(function)
        def shim(*args: Any, **kwargs: Any) -> Any:
            if len(args) > taken:
                args = moved(args, kwargs)
            return function(*args, **kwargs)

        return shim  # type: ignore[return-value]

    return wrap


def warn_renamed(old: str, new: str) -> None:
    """Says that the member `old` is going and `new` is what to use instead."""
    warnings.warn(f"{old} is deprecated and goes with the next release; use {new}", DeprecationWarning, 3)
