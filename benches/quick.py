#!/usr/bin/env python3
"""The headline figures in well under three minutes (#38): whole processes, timed from the
outside, interleaved round by round (each round runs every command once, in a rotating order),
medians, the machine's load beside them.

    cargo build --release --locked -p palisade && python3 benches/quick.py [--rounds N]

Figures (the issue's table):
  bare bwrap                 bwrap --ro-bind / / --bind WS WS --tmpfs over ~/.ssh and ~/.aws
                             (made here, so that they exist) --dev /dev --proc /proc
                             --unshare-all --die-with-parent --new-session true
  run bwrap                  palisade run -- true, linux-bwrap, networkMode none, its decision
                             in the decision cache (a run that follows another: the run's temp
                             dir is a slot, the same path from run to run)
  run bwrap (cache miss)     the same, the decision cache emptied before it
  run landlock               palisade run -- true, linux-landlock, its decision in the cache
  decide (cache hit)         palisade decide, its decision in the decision cache
  decide (cache miss)        palisade decide, the decision cache emptied before it
and the ratios run bwrap / bare bwrap, run landlock / bare bwrap. Every cache but the decision
cache is warm in all of them. Runs as the invoking user; needs bwrap and a built release binary.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument(
        "--palisade",
        default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "palisade"),
    )
    args = parser.parse_args()
    palisade = args.palisade
    if not os.access(palisade, os.X_OK):
        sys.exit(f"no palisade at {palisade}: cargo build --release --locked -p palisade")
    bwrap = shutil.which("bwrap")
    if not bwrap:
        sys.exit("bwrap is not installed")

    with tempfile.TemporaryDirectory(prefix="palisade-quick-") as base:
        home = os.path.join(base, "home")
        ws = os.path.join(base, "ws")
        cache = os.path.join(base, "cache")
        for d in (home, ws, cache, os.path.join(home, ".ssh"), os.path.join(home, ".aws")):
            os.makedirs(d, exist_ok=True)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "PALISADE_CACHE_DIR": cache,
            "LANG": "C",
        }

        def taskpack(backend):
            path = os.path.join(base, f"{backend}.yaml")
            with open(path, "w") as f:
                f.write(
                    "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: quick}\n"
                    f"spec:\n  sandbox:\n    preferredBackends: [{backend}]\n    networkMode: none\n"
                )
            return path

        bare = [
            bwrap, "--ro-bind", "/", "/", "--bind", ws, ws,
            "--tmpfs", os.path.join(home, ".ssh"), "--tmpfs", os.path.join(home, ".aws"),
            "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent",
            "--new-session", "true",
        ]
        run_bwrap = [palisade, "run", "--taskpack", taskpack("linux-bwrap"), "--", "true"]
        run_landlock = [palisade, "run", "--taskpack", taskpack("linux-landlock"), "--", "true"]
        decide = [palisade, "decide", "--json", "--taskpack", taskpack("linux-bwrap")]

        def timed(argv, before=None):
            if before:
                before()
            start = time.perf_counter()
            done = subprocess.run(argv, cwd=ws, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            took = (time.perf_counter() - start) * 1e3
            if done.returncode != 0:
                sys.exit(f"{argv[:3]} failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
            return took

        def empty_decisions():
            shutil.rmtree(os.path.join(cache, "decisions"), ignore_errors=True)

        figures = {
            "bare bwrap": lambda: timed(bare),
            "run bwrap": lambda: timed(run_bwrap),
            "run bwrap (cache miss)": lambda: timed(run_bwrap, empty_decisions),
            "run landlock": lambda: timed(run_landlock),
            "decide (cache hit)": lambda: timed(decide),
            "decide (cache miss)": lambda: timed(decide, empty_decisions),
        }
        # Warm every cache (probes, compiled component, the decision).
        for measure in figures.values():
            measure()
        timed(decide)
        times = {name: [] for name in figures}
        names = list(figures)
        started = time.perf_counter()
        for round_ in range(args.rounds):
            order = names[round_ % len(names):] + names[: round_ % len(names)]
            for name in order:
                # Each hit is measured with its decision back in the cache after a miss.
                if name == "decide (cache hit)":
                    timed(decide)
                elif name == "run bwrap":
                    timed(run_bwrap)
                elif name == "run landlock":
                    timed(run_landlock)
                times[name].append(figures[name]())
        elapsed = time.perf_counter() - started
        medians = {name: statistics.median(values) for name, values in times.items()}
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
        print(f"palisade quick figures: {args.rounds} interleaved rounds in {elapsed:.1f} s, load {load} (1, 5, 15 min), medians")
        for name, value in medians.items():
            print(f"  {name:<22} {value:7.2f} ms")
        print(f"  ratio run bwrap / bare bwrap     {medians['run bwrap'] / medians['bare bwrap']:.2f}x")
        print(f"  ratio run landlock / bare bwrap  {medians['run landlock'] / medians['bare bwrap']:.2f}x")


if __name__ == "__main__":
    main()
