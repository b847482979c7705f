"""Replay the inputs the fuzzers found (fuzz/regressions/, made by fuzz/make_regressions.py).

Each must meet the fuzzing contract: opening and reading every tensor every way (both orders,
stream, read_many, read_numpy) succeeds or raises a ReaderError, within a CPU-time bound and
without allocations sized by a claimed field; the sans-IO zipfmt functions raise only their own
errors. These fail until the bugs they pin are fixed in reader/ (see fuzz/README.md).
"""

from __future__ import annotations

import pathlib
import signal

import pytest

from fuzz import bounds, mutators, oracles

pytestmark = pytest.mark.unit

REGRESSIONS = pathlib.Path(__file__).resolve().parent.parent / "fuzz" / "regressions"
INPUTS = sorted(REGRESSIONS.glob("*.pt2"))
CPU_BOUND = 5.0  # a hang guard (minutes of CPU without the fix), not a timing assertion


class Hang(BaseException):
    """Raised from SIGVTALRM: the input used more than CPU_BOUND seconds of CPU."""


def _on_alarm(signum: int, frame: object) -> None:
    raise Hang(f"over {CPU_BOUND}s of CPU time")


@pytest.mark.parametrize("path", INPUTS, ids=[path.stem for path in INPUTS])
def test_regression_input_meets_the_contract(path: pathlib.Path) -> None:
    data = path.read_bytes()
    previous = signal.signal(signal.SIGVTALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_VIRTUAL, CPU_BOUND)
    try:
        with bounds.memory_cap():
            oracles.check_case(mutators.Case(data, path.name))
            oracles.exercise_zipfmt(data)
    except Hang as exc:
        pytest.fail(f"{path.name}: {exc}")
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


def test_there_are_regression_inputs() -> None:
    assert INPUTS, f"no inputs in {REGRESSIONS}"
