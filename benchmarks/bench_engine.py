"""The engine's round as users get it: steady state (many rounds in one process) and the first round's
latency (process start to first round done), for every way of running it, in one run.

Scenarios (``--scenario``; data generated in memory):

* ``mnist-mlp``: paper 000's MNIST round, 100 clients of 500 MNIST-shaped samples (784 features,
  10 classes), m = 10 clients per round, N = 50 local SGD steps of batch B = 50, MLP 784-50-10;
* ``user-cnn``: a user's small CNN (``nn.Module``: Conv2d(1, 8, 3), ReLU, 2x2 max pooling, a linear
  head) on the same samples as 1 x 28 x 28 images, m = 10, N = 20, B = 32;
* ``digits-softmax``: a softmax regression on the embedded digits with clients of ~18 samples, where
  per-step overhead rather than arithmetic dominates;
* ``cnn-bn``: a user's CNN with BatchNorm and dropout on 3 x 32 x 32 images (issue 23).

Configurations, each in its own process:

* ``papers-loop``: the per-client loop of the papers' released code: for each client a fresh model
  copy (``deepcopy``) and ``torch.optim.SGD``, each step's batch from ``next(iter(DataLoader(...)))``;
* ``tight-loop``: the same loop without the DataLoader (batches sliced from in-memory tensors);
* ``sequential``: fedsample's reference backend (``simulate(..., backend="sequential")``);
* ``batched``: fedsample's batched backend (``simulate``; the fused kernels for the dense models);
* ``batched, generic`` (dense models): the same model through the generic ``torch.func`` path;
* ``batched x15`` (dense models): 5 samplers x 3 seeds trained together by one ``simulate`` call.

**Steady state.** Every configuration's process is started and warmed up (``--warmup`` rounds), then
the configurations take turns: in each of ``--blocks`` cycles, each runs ``--rounds`` rounds, one
configuration at a time, and the matmul probe runs once. fedsample's rounds are those of ONE
``simulate`` call in its process (warm-up and cycles together, paused between the cycles), each timed
by the round loop itself (``History.round_seconds``: sampling, local training, aggregation, server
step, sampler update); the loops' rounds are timed one by one. A configuration's
figure is the median of its rounds; its ratios to the loops are also given per cycle (min..max), each
from rounds measured next to each other, so that a drift of the machine's load hits both sides.

**First round.** A fresh process per configuration (``--first-repeats`` times, alternated; the
median): from just before the process starts to its first round done (fedsample: the first round
of a ``simulate`` call reported to ``on_round``; it includes the evaluation of the initial model,
which ``simulate`` makes before the first round).

Reported: seconds per round, the ratios to the papers' loop and the tight loop, effective GFLOP/s
(3x the forward FLOPs of every sample processed: the usual training estimate) and their share of a
fp32 matmul throughput probe (1024^3 on a CPU, 8192^3 on a GPU) measured in the same run, peak host
memory, and the load average. Under load the absolute times are not an idle machine's; the ratios and
shares, measured side by side, are the figures to compare. Goals (issue 34, steady state): the
batched MNIST round >= 75% of the probe, 15 runs batched >= 85%, the sequential backend >= 1x the
papers' loop, the generic path within 1.5x of the fused kernels, the user CNN >= 2x the tight loop in
every cycle; on a GPU the batched round >= 10x the per-client loop.

Run: ``python benchmarks/bench_engine.py`` (``--scenario mnist-mlp user-cnn``, ``--blocks 5 --rounds 3``,
``--device cuda``, ``--wait spin``, ``--loop-wait passive``, ``--threads 1``, ``--json``). fedsample
runs with its OpenMP threads waiting passively, as shipped; ``--wait spin`` gives it OpenMP's own spinning, as the loops
have. Under load, spinning threads collapse (they burn the time slices the other threads need), so
the loops, spinning, are slowed far more than fedsample: ``--loop-wait passive`` runs them waiting
passively too, the fair comparison on a shared machine. On a heavily loaded machine (load several
times the CPUs) every fork and join of a parallel region waits for the scheduler, whatever the
waiting policy: ``--threads 1`` (every configuration and the probe on one thread) then measures the
work of a round rather than the scheduler's latency.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _engine_workloads import SCENARIOS, Runner, fedsample_runner, loop_runner, matmul_probe, round_gflop

LOOPS = ("papers-loop", "tight-loop")


def configurations(scenario: str) -> list[tuple[str, int]]:
    """(name, runs trained together) of every configuration of ``scenario``."""
    out = [("papers-loop", 1), ("tight-loop", 1), ("sequential", 1), ("batched", 1)]
    if "module" not in SCENARIOS[scenario]:
        out += [("batched, generic", 1), ("batched x15", 15)]
    return out


def make_runner(name: str, scenario: str, device: str, total_rounds: int, threads: int = 0) -> Runner:
    """A configuration's runner; ``threads``: PyTorch's threads in every configuration (0: as shipped)."""
    if threads:
        torch.set_num_threads(threads)
    if name in LOOPS:
        return loop_runner(scenario, torch.device(device), dataloader=name == "papers-loop")
    backend = "sequential" if name == "sequential" else "batched"
    runs = 15 if name == "batched x15" else 1
    generic = name.endswith("generic")
    return fedsample_runner(
        scenario,
        backend=backend,
        runs=runs,
        device=device,
        generic=generic,
        total_rounds=total_rounds,
        threads=threads or "auto",
    )


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _worker(name: str, scenario: str, device: str, warmup: int, total: int, threads: int, conn: Any) -> None:
    """A configuration's process: warm up, then run the rounds asked for until told to stop (None)."""
    runner = make_runner(name, scenario, device, total, threads)
    runner(warmup)
    conn.send(([], _peak_mb()))
    while (rounds := conn.recv()) is not None:
        conn.send((runner(rounds), _peak_mb()))


def _policy_env(name: str, args: argparse.Namespace) -> dict[str, str]:
    """The environment of a configuration's process: fedsample as shipped (passive waiting, what ``import
    fedsample`` sets before torch loads) or spinning; the loops with OpenMP's own waiting (spinning a
    while, then sleeping) or, with ``--loop-wait passive``, passive waiting as fedsample's."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if name in LOOPS:
        if args.loop_wait == "passive":
            env["OMP_WAIT_POLICY"] = "PASSIVE"
    else:
        env.update({"GOMP_SPINCOUNT": "300000"} if args.wait == "spin" else {"OMP_WAIT_POLICY": "PASSIVE"})
    return env


def steady_state(scenario: str, args: argparse.Namespace) -> tuple[dict[str, dict[str, Any]], list[float]]:
    """Per configuration: its rounds per cycle and peak MB; and the probe of each cycle."""
    ctx = mp.get_context("spawn")
    workers: dict[str, tuple[Any, Any]] = {}
    saved = dict(os.environ)
    try:
        for name, _ in configurations(scenario):
            os.environ.clear()
            os.environ.update(_policy_env(name, args))
            parent, child = ctx.Pipe()
            total = args.warmup + args.blocks * args.rounds
            settings = (name, scenario, args.device, args.warmup, total, args.threads)
            proc = ctx.Process(target=_worker, args=(*settings, child))
            proc.start()
            workers[name] = (proc, parent)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    for _, conn in workers.values():
        conn.recv()  # every process built and warmed up (together), before any cycle is timed
    rows: dict[str, dict[str, Any]] = {name: {"cycles": [], "rss_mb": 0.0} for name in workers}
    probes = []
    device = torch.device(args.device)
    for _ in range(args.blocks):
        for name, (_, conn) in workers.items():
            conn.send(args.rounds)
            times, rss = conn.recv()
            rows[name]["cycles"].append(times)
            rows[name]["rss_mb"] = rss
        probes.append(matmul_probe(device, repeats=3))
    for proc, conn in workers.values():
        conn.send(None)
        proc.join()
    return rows, probes


def first_round(scenario: str, args: argparse.Namespace) -> dict[str, float]:
    """Median seconds from process start to first round done, per configuration (fresh processes, alternated)."""
    seconds: dict[str, list[float]] = {name: [] for name, _ in configurations(scenario)}
    for _ in range(args.first_repeats):
        for name in seconds:
            command = [sys.executable, __file__, "--first-round", name, "--scenario", scenario, "--device", args.device]
            command += ["--threads", str(args.threads)]
            start = time.time()
            out = subprocess.run(command, env=_policy_env(name, args), capture_output=True, text=True, check=True)
            done = float(out.stdout.split("FIRST-ROUND-DONE ")[1].split()[0])
            seconds[name].append(done - start)
    return {name: statistics.median(values) for name, values in seconds.items()}


def report(scenario: str, args: argparse.Namespace) -> dict[str, Any]:
    sc = SCENARIOS[scenario]
    gflop = round_gflop(scenario)
    runs_of = dict(configurations(scenario))
    print(f"\n{sc['title']}\nuseful work per round: {gflop:.3f} GFLOP")
    rows, probes = steady_state(scenario, args)
    probe = statistics.median(probes)
    load = os.getloadavg()
    print(
        f"steady state: {args.rounds} rounds x {args.blocks} cycles per configuration after {args.warmup} warm-up "
        f"rounds; probe in the cycles {min(probes):.1f}..{max(probes):.1f} GFLOP/s (median {probe:.1f}); "
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    # Seconds per run-round: per cycle (median of its rounds) and over every round.
    per_cycle = {n: [statistics.median(c) / runs_of[n] for c in r["cycles"]] for n, r in rows.items()}
    overall = {n: statistics.median([t for c in r["cycles"] for t in c]) / runs_of[n] for n, r in rows.items()}
    print(
        f"{'configuration':<18}{'s/round':>9}{'runs/s':>8}{'vs papers':>10}{'(cycles)':>13}"
        f"{'vs tight':>9}{'(cycles)':>13}{'GFLOP/s':>9}{'of probe':>9}{'peak MB':>8}"
    )
    out: dict[str, Any] = {"round_gflop": gflop, "probe_gflops": probes, "load": load, "steady": {}, "first": {}}
    for name, row in rows.items():
        ratios = {base: [b / t for b, t in zip(per_cycle[base], per_cycle[name], strict=True)] for base in LOOPS}
        gflops = gflop / overall[name]
        out["steady"][name] = {
            "seconds": overall[name] * runs_of[name],
            "runs": runs_of[name],
            "vs_papers": overall["papers-loop"] / overall[name],
            "vs_tight": overall["tight-loop"] / overall[name],
            "vs_papers_cycles": ratios["papers-loop"],
            "vs_tight_cycles": ratios["tight-loop"],
            "gflops": gflops,
            "of_probe": gflops / probe,
            "rss_mb": row["rss_mb"],
        }
        r = out["steady"][name]
        spans = {base: f"{min(v):.2f}..{max(v):.2f}" for base, v in ratios.items()}
        print(
            f"{name:<18}{r['seconds']:>9.4f}{1 / overall[name]:>8.2f}{r['vs_papers']:>9.2f}x"
            f"{spans['papers-loop']:>13}{r['vs_tight']:>8.2f}x{spans['tight-loop']:>13}"
            f"{gflops:>9.1f}{gflops / probe:>9.0%}{row['rss_mb']:>8.0f}"
        )
    if args.first_repeats:
        first = first_round(scenario, args)
        load = os.getloadavg()
        print(
            f"first round: process start to first round done, median of {args.first_repeats} fresh processes; "
            f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        )
        print(f"{'configuration':<18}{'seconds':>9}{'vs papers':>10}{'vs tight':>9}{'of probe':>9}")
        for name, seconds in first.items():
            per_run = seconds / runs_of[name]
            share = gflop / per_run / probe
            out["first"][name] = {"seconds": seconds, "vs_papers": first["papers-loop"] / per_run}
            out["first"][name].update(vs_tight=first["tight-loop"] / per_run, of_probe=share)
            print(
                f"{name:<18}{seconds:>9.2f}{first['papers-loop'] / per_run:>9.2f}x"
                f"{first['tight-loop'] / per_run:>8.2f}x{share:>9.1%}"
            )
    goals(scenario, out["steady"], args.device)
    return out


def goals(scenario: str, steady: dict[str, dict[str, Any]], device: str) -> None:
    """Issue 34's goals for this scenario, each with the figure measured (steady state)."""
    lines = []
    if device.startswith("cuda"):
        ratio = steady["batched"]["vs_papers"]
        lines.append(f"GPU: batched / per-client loop {ratio:.2f}x (goal >= 10x)")
    elif scenario == "mnist-mlp":
        lines.append(f"batched round: {steady['batched']['of_probe']:.0%} of the probe (goal >= 75%)")
        lines.append(f"15 runs batched: {steady['batched x15']['of_probe']:.0%} of the probe (goal >= 85%)")
    if "batched, generic" in steady:
        ratio = steady["batched"]["gflops"] / steady["batched, generic"]["gflops"]
        lines.append(f"generic torch.func path / fused kernels: {ratio:.2f}x (goal <= 1.5x)")
    cycles = steady["sequential"]["vs_papers_cycles"]
    lines.append(
        f"sequential backend / papers' loop: {steady['sequential']['vs_papers']:.2f}x "
        f"(cycles {min(cycles):.2f}..{max(cycles):.2f}; goal >= 1x)"
    )
    if "module" in SCENARIOS[scenario]:
        cycles = steady["batched"]["vs_tight_cycles"]
        lines.append(f"batched / tight loop per cycle: {', '.join(f'{c:.2f}x' for c in cycles)} (goal >= 2x in each)")
    for line in lines:
        print(f"  {line}")


def _first_round_child(name: str, scenario: str, device: str, threads: int) -> None:
    """The child of :func:`first_round`: build the configuration, train one round, print the time."""
    make_runner(name, scenario, device, 2, threads)(1)  # fedsample: round 1 of 2, so no evaluation after it
    print(f"FIRST-ROUND-DONE {time.time()!r}", flush=True)
    os._exit(0)  # without training the second round


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", nargs="+", choices=(*SCENARIOS, "all"), default=["mnist-mlp", "user-cnn"])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per configuration and cycle (default 3)")
    parser.add_argument("--blocks", type=int, default=5, help="cycles of the steady state (default 5)")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up rounds of each process (default 2)")
    parser.add_argument("--first-repeats", type=int, default=3, help="fresh processes per configuration (0: skip)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:index]")
    parser.add_argument("--wait", choices=("shipped", "spin"), default="shipped", help="fedsample's OpenMP waiting")
    parser.add_argument(
        "--loop-wait",
        choices=("own", "passive"),
        default="own",
        help="the loops' OpenMP waiting: their own (default) or passive, as fedsample's (fair under load)",
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    parser.add_argument(
        "--threads", type=int, default=0, help="PyTorch threads of every configuration and the probe (0: as shipped)"
    )
    parser.add_argument("--first-round", help=argparse.SUPPRESS)
    args = parser.parse_args()
    scenarios = list(SCENARIOS) if "all" in args.scenario else args.scenario
    if args.first_round:
        _first_round_child(args.first_round, scenarios[0], args.device, args.threads)
        return
    if args.threads:
        torch.set_num_threads(args.threads)  # the probe's
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"bench_engine.py: skipped: --device {args.device}, but PyTorch {torch.__version__} sees no CUDA device")
        return
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    load = os.getloadavg()
    print(f"torch {torch.__version__}, {args.device} ({where}); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    fedsample_wait = "passive waiting (as shipped)" if args.wait == "shipped" else "spinning"
    loop_wait = "OpenMP's own (spin, then sleep)" if args.loop_wait == "own" else "passive waiting"
    print(f"OpenMP threads: fedsample {fedsample_wait}; the loops {loop_wait}")
    out = {name: report(name, args) for name in scenarios}
    if args.json:
        print(json.dumps({"device": args.device, "wait": args.wait, "scenarios": out}))


if __name__ == "__main__":
    main()
