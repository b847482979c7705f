"""What the host says of a bench row: how much of the CPU the hypervisor took while it ran (`steal` in
/proc/stat), and a process's memory (`status_kib`).

On a shared VM the host takes CPU time from a loaded guest and none from an idle one (measured here: 0% idle,
2 - 21% in 10 s windows under load), so an idle check before a run says nothing about the run. A row measured
under steal swings by ±20% whoever the contender; the benches print the share beside each verdict.
"""

from __future__ import annotations

import pathlib
import re

NOISY = 0.05  # a row with more steal than this is flagged: its ratio says more about the host than the code

CpuTimes = tuple[int, int]  # (all ticks, stolen ticks)


def cpu_times() -> CpuTimes | None:
    """The machine's CPU ticks so far, all and stolen; None where /proc/stat has no steal column."""
    try:
        fields = pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if fields[:1] != ["cpu"] or len(fields) < 9:
        return None
    ticks = [int(value) for value in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return sum(ticks), ticks[7]


def steal_note(since: CpuTimes | None) -> str:
    """'host steal N%' for the time since `since`, flagged when it is enough to sway a ratio."""
    now = cpu_times()
    if since is None or now is None or now[0] <= since[0]:
        return "host steal: unknown"
    share = (now[1] - since[1]) / (now[0] - since[0])
    flag = " (noisy: the host took CPU during this row)" if share > NOISY else ""
    return f"host steal {share:.0%}{flag}"


def status_kib(pid: int, field_name: str) -> int:
    """A /proc/PID/status field in KiB (VmRSS, VmHWM); 0 once the process is gone."""
    try:
        text = pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(rf"^{field_name}:\s+(\d+) kB", text, re.M)
    return int(found.group(1)) if found else 0
