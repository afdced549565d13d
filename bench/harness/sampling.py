"""CPU and memory of a function process, read from /proc (Linux)."""

import os
import platform

from .common import BenchError

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """user + sys of the whole process (every thread, live or exited), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_snapshot(pid):
    """(ticks, fine): user+sys from /proc/<pid>/stat (every thread, live or exited, in 10 ms
    ticks) and the scheduler's run time of each live thread (/proc/<pid>/task/*/schedstat, ns)."""
    fine = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    fine += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        fine = None
    return cpu_seconds(pid), (None if fine is None else fine / 1e9)


def cpu_between(before, after):
    """CPU seconds between two snapshots: the scheduler's nanoseconds, unless a thread that ran
    meanwhile has exited (then its time is only in the ticks, which exceed the fine figure)."""
    ticks = after[0] - before[0]
    if before[1] is None or after[1] is None:
        return ticks
    fine = after[1] - before[1]
    return ticks if ticks - fine > 2 / CLK_TCK else fine


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise BenchError(f"no VmHWM in /proc/{pid}/status")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"
