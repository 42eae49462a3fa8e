#!/usr/bin/env python3
"""The headline figures in well under three minutes (#38): whole processes, timed from the
outside, interleaved round by round (each round runs every command once, in a shuffled order),
medians, the machine's load beside them.

    cargo build --release --locked -p palisade && python3 benches/quick.py [--rounds N]
        [--baseline OTHER/palisade]

Figures (the issue's table):
  bare bwrap                 bwrap --ro-bind / / --bind WS WS --tmpfs over ~/.ssh and ~/.aws
                             (made here, so that they exist) --dev /dev --proc /proc
                             --unshare-all --die-with-parent --new-session true
  bwrap, palisade's argv     the very argv `palisade run` gives bwrap (read from the running
                             bwrap's /proc/<pid>/cmdline), its command `true` run as bwrap's
                             PID 1: the plan's namespaces and mounts, no launcher
  + palisade-init as pid 1   the same with Palisade's PID 1 (palisade-init __sandbox-pid1) in
                             front of `true`, as every run has it; no seccomp stub, whose
                             observer only a launcher can serve
  run bwrap                  palisade run -- true, linux-bwrap, networkMode none, its decision
                             in the decision cache (a run that follows another: the run's temp
                             dir is a slot, the same path from run to run)
  run bwrap (cache miss)     the same, the decision cache emptied before it
  run landlock               palisade run -- true, linux-landlock, its decision in the cache
  decide (cache hit)         palisade decide, its decision in the decision cache
  decide (cache miss)        palisade decide, the decision cache emptied before it
  bare bwrap, outside home   bare bwrap and run bwrap with the home and workspace under target/
  run bwrap, outside home    instead of /tmp: where a user's are. Under /tmp the sandbox's private
                             /tmp hides ~/.ssh and ~/.aws, so a run masks nothing there; outside,
                             it masks each with an observed mask (a FUSE node bound over it)
Each timed command starts 20 ms after the one before ended (see `timed`). The ratios: run bwrap /
bare bwrap, run bwrap / bwrap with Palisade's argv and init (what the launcher itself adds), run
landlock / bare bwrap. With --baseline, another build's `run bwrap` and `run landlock` join the
same rounds (each build with its own caches and run temp dirs), for a step's before and after,
with the median of the rounds' differences beside the ratio of the medians. Each build runs from
a copy, as an installed one does: under target/, outside the directories a bwrap sandbox gets
privately, as ~/.cargo/bin is (so bwrap runs palisade-init where it is; a copy under /tmp would
be bound). Every cache but the decision cache is warm in all of them. Runs as
the invoking user; needs bwrap and a built release binary.

The Landlock figure depends on where the scratch directory is (--dir): Landlock cannot deny
~/.ssh beneath a readable /, so a run allow-lists every entry beside each directory on the way
to it, and the home here is inside the scratch directory. With 197 entries in /tmp a Landlock
run took 9.94 ms, with the same home under an almost empty /var/tmp 7.12 ms (80 interleaved
rounds at e343ddc): about 14 us per entry, 4 in the launcher's listing and plan, the rest in
palisade-init's parsing, opening and adding of the rules. Since 93b98a9 about 12 us (300 more
files in the home, 100 interleaved rounds): 2.4 in the launcher, 8.2 in palisade-init, mostly
the kernel's (the open, kind check, add and close of each rule). The figures say how many
entries there were.
"""

import argparse
import os
import random
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The pause before each timed command (see `timed`).
SETTLE_SECONDS = 0.02

# The placeholders `palisade run` holds at a workspace's missing protected paths.
PROTECTED = (".git", ".github", ".loopwright", "AGENTS.md", "CLAUDE.md")


def bwrap_argv_of(run_argv, cwd, env):
    """The argv `palisade run` gives bwrap: a run of `sleep` whose bwrap is read from /proc."""
    child = subprocess.Popen(run_argv + ["--", "sleep", "5"], cwd=cwd, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    if ppid != child.pid:
                        continue
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        argv = [a.decode() for a in f.read().split(b"\0")[:-1]]
                except (OSError, ValueError, IndexError):
                    continue
                if argv and os.path.basename(argv[0]) == "bwrap" and "sleep" in " ".join(argv):
                    return argv
            time.sleep(0.005)
        sys.exit("could not read the bwrap argv of `palisade run -- sleep 5`")
    finally:
        child.kill()
        child.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument(
        "--palisade",
        default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "palisade"),
    )
    parser.add_argument("--baseline", help="another build's palisade, measured in the same rounds")
    parser.add_argument(
        "--dir",
        help="where the scratch directory (home, workspace, caches) is made; default the "
        "system's temp dir. Under Landlock every entry beside it is a rule of the run (see below)",
    )
    args = parser.parse_args()
    palisade = args.palisade
    for binary in [palisade] + ([args.baseline] if args.baseline else []):
        if not os.access(binary, os.X_OK):
            sys.exit(f"no palisade at {binary}: cargo build --release --locked -p palisade")
    bwrap = shutil.which("bwrap")
    if not bwrap:
        sys.exit("bwrap is not installed")

    # The builds are installed (copied) outside every directory a bwrap sandbox gets privately
    # (/tmp, /run, /var/tmp, /dev/shm), as `cargo install` puts them in ~/.cargo/bin: bwrap
    # then runs palisade-init where it is instead of binding it (docs/backends.md, PID 1).
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    os.makedirs(target, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="palisade-quick-", dir=args.dir) as base, \
            tempfile.TemporaryDirectory(prefix="palisade-quick-bin-", dir=target) as bin_dir, \
            tempfile.TemporaryDirectory(prefix="palisade-quick-home-", dir=target) as outside:
        home = os.path.join(base, "home")
        ws = os.path.join(base, "ws")
        # The workspace of the bare argv figures: its placeholders are made here, so that no
        # run's cleanup takes them away.
        ws_argv = os.path.join(base, "wa")
        cache = os.path.join(base, "cache")
        baseline_cache = os.path.join(base, "baseline-cache")
        # Each build's run temp dirs (slots) apart: two builds may keep them differently.
        runtime = os.path.join(base, "runtime")
        baseline_runtime = os.path.join(base, "baseline-runtime")
        for d in (home, ws, ws_argv, cache, baseline_cache, runtime, baseline_runtime,
                  os.path.join(home, ".ssh"), os.path.join(home, ".aws")):
            os.makedirs(d, exist_ok=True)
        for name in PROTECTED:
            os.mknod(os.path.join(ws_argv, name), stat.S_IFSOCK)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "PALISADE_CACHE_DIR": cache,
            "XDG_RUNTIME_DIR": runtime,
            "LANG": "C",
        }
        baseline_env = dict(env, PALISADE_CACHE_DIR=baseline_cache, XDG_RUNTIME_DIR=baseline_runtime)
        # A home and workspace outside the sandbox's private directories, as a user's are.
        home_out = os.path.join(outside, "home")
        ws_out = os.path.join(outside, "ws")
        for d in (ws_out, os.path.join(home_out, ".ssh"), os.path.join(home_out, ".aws")):
            os.makedirs(d)
        env_out = dict(env, HOME=home_out)

        def installed(binary, name):
            # Each build runs from a copy, with its palisade-init beside it, as an installed one
            # does: a binary the linker just wrote sits in the page cache in small pieces and
            # starts measurably slower (0.15 ms here) than a copy of the same bytes.
            where = os.path.join(bin_dir, name)
            os.makedirs(where)
            for program in ("palisade", "palisade-init"):
                source = os.path.join(os.path.dirname(binary), program)
                if os.path.exists(source):
                    shutil.copy2(source, where)
            return os.path.join(where, "palisade")

        palisade = installed(palisade, "build")
        baseline = installed(args.baseline, "baseline") if args.baseline else None

        def taskpack(backend):
            path = os.path.join(base, f"{backend}.yaml")
            with open(path, "w") as f:
                f.write(
                    "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {name: quick}\n"
                    f"spec:\n  sandbox:\n    preferredBackends: [{backend}]\n    networkMode: none\n"
                )
            return path

        def bare_argv(home, ws):
            return [
                bwrap, "--ro-bind", "/", "/", "--bind", ws, ws,
                "--tmpfs", os.path.join(home, ".ssh"), "--tmpfs", os.path.join(home, ".aws"),
                "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent",
                "--new-session", "true",
            ]

        bare = bare_argv(home, ws)

        def runs(binary):
            return (
                [binary, "run", "--taskpack", taskpack("linux-bwrap"), "--", "true"],
                [binary, "run", "--taskpack", taskpack("linux-landlock"), "--", "true"],
            )

        run_bwrap, run_landlock = runs(palisade)
        bare_out = bare_argv(home_out, ws_out)
        decide = [palisade, "decide", "--json", "--taskpack", taskpack("linux-bwrap")]

        # bwrap's argv as `palisade run` gives it, in the other workspace: its options, then
        # `true` alone or behind Palisade's PID 1.
        argv = bwrap_argv_of(run_bwrap[:-2], ws, env)
        # Its workspace and its temp dir (the run's slot, TMPDIR) swapped for ones of this
        # script's: what a run keeps there is the run's to make and take away.
        slot = argv[argv.index("TMPDIR") + 1]
        argv_tmp = os.path.join(base, "argv-tmp")
        os.makedirs(argv_tmp)
        argv = [a.replace(slot, argv_tmp).replace(ws, ws_argv) for a in argv]
        end = argv.index("--")
        options = argv[:end]
        pid1 = argv[end + 1:end + 5]
        if pid1[1:3] != ["__sandbox-pid1", "--build"]:
            sys.exit(f"unexpected command in bwrap's argv: {argv[end + 1:]}")
        # `true` as bwrap's PID 1 (no --as-pid-1: bwrap's own reaper), or behind palisade-init.
        own_argv = [a for a in options if a != "--as-pid-1"] + ["--", "/usr/bin/true"]
        own_argv_init = options + ["--"] + pid1 + ["--", "/usr/bin/true"]

        decisions = os.path.join(cache, "decisions")
        kept = os.path.join(cache, "decisions.kept")

        def timed(argv, miss=False, run_env=env, cwd=ws):
            # A miss decides with the decision cache set aside, which is put back after: no
            # figure needs a run of its own to fill it again.
            if miss and os.path.isdir(decisions):
                os.rename(decisions, kept)
            try:
                return timed_once(argv, run_env, cwd)
            finally:
                if miss and os.path.isdir(kept):
                    shutil.rmtree(decisions, ignore_errors=True)
                    os.rename(kept, decisions)

        def timed_once(argv, run_env, cwd):
            # What a sandbox leaves the kernel to do after it exits (its network namespace's
            # teardown runs in a kernel worker) would otherwise land on whatever runs next, on
            # two cores a figure's worth: every figure starts on a settled machine.
            time.sleep(SETTLE_SECONDS)
            start = time.perf_counter()
            done = subprocess.run(argv, cwd=cwd, env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            took = (time.perf_counter() - start) * 1e3
            if done.returncode != 0:
                sys.exit(f"{argv[:3]} failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
            return took

        figures = {
            "bare bwrap": lambda: timed(bare),
            "bwrap, palisade's argv": lambda: timed(own_argv),
            "+ palisade-init as pid 1": lambda: timed(own_argv_init),
            "run bwrap": lambda: timed(run_bwrap),
            "run bwrap (cache miss)": lambda: timed(run_bwrap, miss=True),
            "run landlock": lambda: timed(run_landlock),
            "decide (cache hit)": lambda: timed(decide),
            "decide (cache miss)": lambda: timed(decide, miss=True),
            "bare bwrap, outside home": lambda: timed(bare_out, cwd=ws_out),
            "run bwrap, outside home": lambda: timed(run_bwrap, run_env=env_out, cwd=ws_out),
        }
        if baseline:
            base_bwrap, base_landlock = runs(baseline)
            figures["baseline run bwrap"] = lambda: timed(base_bwrap, run_env=baseline_env)
            figures["baseline run landlock"] = lambda: timed(base_landlock, run_env=baseline_env)
        # Warm every cache (probes, compiled component, the decisions). A compiled component
        # is verified in full (SHA-256 of 4.5 MB, about 3 ms a load) until it has not changed
        # for 2 s, and recorded as verified at the next load: warm twice, 2 s apart, so that
        # the misses measure what a user's later runs pay, not the first seconds after a compile.
        for measure in figures.values():
            measure()
        time.sleep(2.1)
        for measure in figures.values():
            measure()
        times = {name: [] for name in figures}
        names = list(figures)
        # A fresh order every round (the same from one invocation to the next): no figure
        # always follows the same one.
        order = random.Random(38)
        started = time.perf_counter()
        for _ in range(args.rounds):
            order.shuffle(names)
            for name in names:
                times[name].append(figures[name]())
        elapsed = time.perf_counter() - started
        medians = {name: statistics.median(values) for name, values in times.items()}
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
        print(f"palisade quick figures: {args.rounds} interleaved rounds in {elapsed:.1f} s, load {load} (1, 5, 15 min), medians")
        beside = len(os.listdir(os.path.dirname(base))) - 1
        print(f"  (the scratch directory has {beside} entries beside it in {os.path.dirname(base)}: the Landlock runs allow-list each)")
        for name, value in medians.items():
            print(f"  {name:<26} {value:7.2f} ms")

        def ratio(label, a, b):
            print(f"  ratio {label:<44} {medians[a] / medians[b]:.2f}x")

        ratio("run bwrap / bare bwrap", "run bwrap", "bare bwrap")
        ratio("run bwrap / bwrap with palisade's argv and init", "run bwrap", "+ palisade-init as pid 1")
        ratio("bwrap with palisade's argv / bare bwrap", "bwrap, palisade's argv", "bare bwrap")
        ratio("run landlock / bare bwrap", "run landlock", "bare bwrap")
        ratio("run bwrap / bare bwrap, home outside /tmp", "run bwrap, outside home", "bare bwrap, outside home")
        if args.baseline:
            ratio("run bwrap / baseline run bwrap", "run bwrap", "baseline run bwrap")
            ratio("run landlock / baseline run landlock", "run landlock", "baseline run landlock")

            def paired(label, a, b):
                # Each round timed both builds: the median of the rounds' differences moves far
                # less with the machine than the difference of the medians (±0.2 ms here).
                change = statistics.median(x - y for x, y in zip(times[a], times[b]))
                print(f"  paired {label:<43} {change:+.2f} ms")

            paired("run bwrap - baseline run bwrap", "run bwrap", "baseline run bwrap")
            paired("run landlock - baseline run landlock", "run landlock", "baseline run landlock")


if __name__ == "__main__":
    main()
