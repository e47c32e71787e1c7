"""The thread policy on a shared machine: the default job idle, beside busy processes, and several at once.

The job is ``fedsample run default`` (MD, uniform and clustered sampling x 3 seeds on the embedded
digits, an MLP, FedAvg; ``--rounds`` shortens it), each time a fresh process, timed from start to
exit (what a user waits for). Settings, compared in the same run of this script:

* ``default``: fedsample's policy (OpenMP threads wait passively; ``threads = "auto"``, one per
  usable CPU);
* ``1 thread``: ``--set training.threads=1``;
* ``all, spinning``: one thread per CPU with OpenMP's own waiting (``GOMP_SPINCOUNT=300000``, libgomp's
  default spin before sleeping): fedsample's behaviour before the policy, the baseline of the idle target;
* ``all, passive``: one thread per CPU, waiting passively, set in the environment
  (``OMP_WAIT_POLICY=PASSIVE``): the default's policy, as a user who imports torch first sets it.

Scenarios:

* ``idle``: the job alone;
* ``busy``: beside one busy process per CPU (a Python loop each), the shared-node case;
* ``parallel``: ``--parallel`` (default 3) copies of the job at once, a sweep's case; the time is the
  mean of the copies' times.

Each (scenario, setting) is measured ``--repeats`` times, interleaved, and the median is kept. Targets
(issue 23 item 3): under contention (``busy``, ``parallel``) the default within 1.3x of the best
setting; idle, the default no slower than the previous default (``all, spinning``) by more than 10%.

The load average (1 minute) after each scenario is printed beside its row: the ratios are measured
side by side, the seconds are those of a machine at that load.

Run: ``python benchmarks/bench_threads.py`` (``--rounds 20 --repeats 3 --parallel 3``, ``--scenario busy parallel``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FEDSAMPLE = str(Path(sys.executable).with_name("fedsample"))
SETTINGS: dict[str, tuple[list[str], dict[str, str]]] = {
    "default": ([], {}),
    "1 thread": (["--set", "training.threads=1"], {}),
    "all, spinning": ([], {"GOMP_SPINCOUNT": "300000"}),
    "all, passive": ([], {"OMP_WAIT_POLICY": "PASSIVE"}),
}
_POLICY_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _command(rounds: int, out: Path, setting: str) -> tuple[list[str], dict[str, str]]:
    flags, extra = SETTINGS[setting]
    env = {k: v for k, v in os.environ.items() if k not in _POLICY_VARIABLES}
    env.update(extra)
    command = [FEDSAMPLE, "run", "default", "--set", f"training.rounds={rounds}", "-q", "--out", str(out)]
    return [*command, "--overwrite", *flags], env


def _jobs(rounds: int, setting: str, copies: int, scratch: Path) -> float:
    """Mean wall seconds of ``copies`` simultaneous runs of the job under ``setting``."""
    started = []
    for copy in range(copies):
        command, env = _command(rounds, scratch / f"{setting.replace(' ', '_').replace(',', '')}-{copy}", setting)
        started.append((time.perf_counter(), subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)))
    seconds = []
    for begin, process in started:
        if process.wait() != 0:
            raise SystemExit(f"the job failed under {setting!r} (exit {process.returncode})")
        seconds.append(time.perf_counter() - begin)
    return statistics.mean(seconds)


class Busy:
    """One busy Python process per CPU while the block runs."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.processes: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Busy:
        self.processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.count)]
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds of the default job (default 20; it ships 60)")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per scenario and setting (median)")
    parser.add_argument("--parallel", type=int, default=3, help="simultaneous jobs of the parallel scenario")
    parser.add_argument("--scenario", nargs="+", choices=("idle", "busy", "parallel"), default="all")
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0))
    load = os.getloadavg()
    print(f"{cpus} usable CPUs; load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"job: fedsample run default --set training.rounds={args.rounds}; median of {args.repeats}, seconds")
    scenarios = ["idle", "busy", "parallel"] if args.scenario == "all" else args.scenario
    loads: dict[str, float] = {}
    scratch = Path(tempfile.mkdtemp(prefix="bench-threads-"))
    results: dict[str, dict[str, float]] = {}
    try:
        _jobs(2, "default", 1, scratch)  # warm the file caches
        for scenario in scenarios:
            times: dict[str, list[float]] = {setting: [] for setting in SETTINGS}
            copies = args.parallel if scenario == "parallel" else 1
            for _ in range(args.repeats):
                for setting in SETTINGS:  # interleaved, so that a drift of the machine hits every setting
                    if scenario == "busy":
                        with Busy(cpus):
                            times[setting].append(_jobs(args.rounds, setting, copies, scratch))
                    else:
                        times[setting].append(_jobs(args.rounds, setting, copies, scratch))
            results[scenario] = {setting: statistics.median(values) for setting, values in times.items()}
            loads[scenario] = os.getloadavg()[0]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    header = f"{'scenario':<10}" + "".join(f"{name:>16}" for name in SETTINGS) + f"{'default / best':>16}{'load':>7}"
    print(header)
    verdicts = []
    for scenario, row in results.items():
        best = min(row.values())
        ratio = row["default"] / best
        cells = "".join(f"{row[name]:>16.2f}" for name in SETTINGS)
        print(f"{scenario:<10}{cells}{ratio:>15.2f}x{loads[scenario]:>7.2f}")
        if scenario == "idle":
            idle = row["default"] / row["all, spinning"]
            verdicts.append(f"idle: default / previous default (all, spinning) = {idle:.2f}x (target <= 1.10x)")
        else:
            verdicts.append(f"{scenario}: default / best = {ratio:.2f}x (target <= 1.30x)")
    for verdict in verdicts:
        print(verdict)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
