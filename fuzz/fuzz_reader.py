"""Long-run fuzzer for pt2serve's reader: open + read everything, and the sans-IO ZIP parser.

    python3 fuzz/fuzz_reader.py --engine atheris --mode structured --seconds 900
    python3 fuzz/fuzz_reader.py --engine atheris --mode raw --seconds 300
    python3 fuzz/fuzz_reader.py --engine hypothesis --seconds 600     # when atheris is missing
    python3 fuzz/fuzz_reader.py --replay fuzz/regressions/*.pt2       # re-run saved inputs

Findings never stop the run: each distinct one (exception type and the innermost frame in
reader/, or the broken oracle) is saved once to --findings as <key>.bin (the archive bytes)
and <key>.txt (traceback and how the input was made); counts go to stats.json.
See fuzz/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import random
import re
import resource
import signal
import sys
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

try:
    import atheris
except ImportError:  # pragma: no cover - the hypothesis engine still works
    atheris = None

if atheris is not None and "--engine" in sys.argv and "atheris" in sys.argv:
    with atheris.instrument_imports(include=["reader"]):
        import reader  # noqa: F401 - instrumented for coverage feedback
from fuzz import bases, bounds, choices, mutators, oracles, targets  # noqa: E402


class Slow(BaseException):
    """The input used more CPU time than the per-input bound."""


class Run:
    def __init__(self, findings: pathlib.Path, time_limit: float) -> None:
        self.findings = findings
        self.time_limit = time_limit
        self.inputs = 0
        self.counts: dict[str, int] = {}
        self.started = time.monotonic()
        self.slowest = 0.0
        findings.mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGVTALRM, self._on_alarm)

    def _on_alarm(self, signum: int, frame: object) -> None:
        raise Slow(f"over {self.time_limit}s of CPU time")

    def one(self, case: mutators.Case, ch: choices.Choices | None = None) -> None:
        self.inputs += 1
        began = time.monotonic()
        signal.setitimer(signal.ITIMER_VIRTUAL, self.time_limit)
        try:
            oracles.check_case(case)
            oracles.exercise_zipfmt(case.data, ch)
        except (Exception, Slow) as exc:  # every escape is a finding; keep fuzzing
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
            self.record(case, exc)
        finally:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        self.slowest = max(self.slowest, time.monotonic() - began)
        if self.inputs % 500 == 0:
            self.write_stats()

    def record(self, case: mutators.Case, exc: BaseException) -> None:
        frames = traceback.extract_tb(exc.__traceback__)
        ours = [f for f in frames if "/reader/" in f.filename] or frames
        where = f"{pathlib.Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "?"
        message = re.sub(r"\d+", "N", str(exc))[:60] if isinstance(exc, targets.ContractViolation) else ""
        key = f"{type(exc).__name__}-{where}-{message}"
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{type(exc).__name__}-{where}")[:80]
        slug += "-" + hashlib.sha1(key.encode()).hexdigest()[:8]
        first = key not in self.counts
        self.counts[key] = self.counts.get(key, 0) + 1
        if first:
            (self.findings / f"{slug}.bin").write_bytes(case.data)
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            (self.findings / f"{slug}.txt").write_text(f"{key}\n{case.what}\n\n{text}")
            print(f"\n*** new finding {key} ({slug}.bin)", file=sys.stderr, flush=True)
        self.write_stats()

    def write_stats(self) -> None:
        stats = {
            "inputs": self.inputs,
            "seconds": round(time.monotonic() - self.started, 1),
            "slowest_input_seconds": round(self.slowest, 3),
            "findings": self.counts,
        }
        (self.findings / "stats.json").write_text(json.dumps(stats, indent=1))


def cap_memory(gib: float) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = bounds._vm_size() + int(gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def run_atheris(run: Run, mode: str, seconds: int, extra: list[str]) -> None:
    def structured(data: bytes) -> None:
        ch = choices.FuzzedChoices(atheris.FuzzedDataProvider(data))
        run.one(mutators.generate_case(ch), ch)

    def raw(data: bytes) -> None:
        run.one(mutators.Case(bytes(data), "raw input"))

    corpus = []
    if mode == "raw":
        seeds = run.findings / "raw-seeds"
        seeds.mkdir(exist_ok=True)
        for name, data in bases.all_bases().items():
            (seeds / name).write_bytes(data)
        corpus = [str(seeds)]
    max_len = "-max_len=65536" if mode == "raw" else "-max_len=4096"
    argv = [sys.argv[0], f"-max_total_time={seconds}", "-timeout=60", "-rss_limit_mb=0", max_len,
            "-len_control=0", *extra, *corpus]  # fmt: skip
    atheris.Setup(argv, structured if mode == "structured" else raw)
    atheris.Fuzz()


def run_hypothesis(run: Run, seconds: int, seed: int) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    deadline = time.monotonic() + seconds

    @settings(max_examples=2_000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def body(data: st.DataObject) -> None:
        ch = choices.HypothesisChoices(data)
        run.one(mutators.generate_case(ch), ch)

    batch = 0
    while time.monotonic() < deadline:
        random.seed(seed + batch)  # hypothesis draws its own seed from `random` when not derandomized
        body()
        batch += 1
        print(f"batch {batch}: {run.inputs} inputs, {len(run.counts)} distinct findings", flush=True)


def run_random(run: Run, seconds: int, seed: int) -> None:
    ch = choices.RandomChoices(random.Random(seed))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run.one(mutators.generate_case(ch), ch)


def replay(paths: list[str], run: Run) -> int:
    for path in paths:
        before = sum(run.counts.values())
        run.one(mutators.Case(pathlib.Path(path).read_bytes(), f"replay {path}"))
        status = "FAILS" if sum(run.counts.values()) > before else "ok"
        print(f"{status:5} {path}")
    return 1 if run.counts else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engine", choices=["atheris", "hypothesis", "random"], default="atheris")
    parser.add_argument("--mode", choices=["structured", "raw"], default="structured",
                        help="atheris: build cases from the fuzz data, or use it as the archive")  # fmt: skip
    parser.add_argument("--seconds", type=int, default=600, help="total time budget")
    parser.add_argument("--time-limit", type=float, default=2.0, help="CPU seconds per input")
    parser.add_argument("--memory-gib", type=float, default=2.0, help="address space allowed beyond start-up")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--findings", type=pathlib.Path, default=pathlib.Path("/tmp/pt2serve-fuzz"))
    parser.add_argument("--replay", nargs="+", help="run these input files once and report")
    args, extra = parser.parse_known_args()
    bases.all_bases()
    for name in bases.all_bases():
        bases.base_map(name)  # map (and read) the unmodified archives before capping memory
    cap_memory(args.memory_gib)
    run = Run(args.findings, args.time_limit)
    if args.replay:
        return replay(args.replay, run)
    if args.engine == "atheris":
        if atheris is None:
            print("atheris is not installed; use --engine hypothesis", file=sys.stderr)
            return 2
        run_atheris(run, args.mode, args.seconds, extra)
    elif args.engine == "hypothesis":
        run_hypothesis(run, args.seconds, args.seed)
    else:
        run_random(run, args.seconds, args.seed)
    run.write_stats()
    print(json.dumps({"inputs": run.inputs, "findings": run.counts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
