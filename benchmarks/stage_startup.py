"""How long a stage command takes to start, and what ``dvc repro`` spends around the stages' own work.

1. **Start-up.**  ``crisscross <stage> --help`` for every stage of the registry (``crisscross.pipelines.registry``): the
   interpreter, the command's imports and argument parsing, nothing else.  **The references are
   ``python -c pass`` and ``python -c "import apache_beam"`` in the same run** (the latter ending in
   ``os._exit`` as the ``crisscross`` command does, so neither pays for tearing Beam's threads
   down), interleaved with the stages round by round (the order rotates), each command's median
   over the rounds counting.  ``÷ beam`` is a stage's median over Beam's: every stage builds a Beam
   pipeline, so about 1.0 is the floor while Beam loads with the command (a little under it: the
   command imports with the garbage collector paused, ``cli.import_stage``).  Beside it, the heavy libraries (``HEAVY``) that
   importing the stage's module loads, from a fresh process: they should load only when a stage
   uses them, after its flags are parsed.  ``import apache_beam`` loads Beam's Google Cloud clients
   whenever they are installed (the ``dataflow`` extra), and boto3 where a machine has it; a stage
   command leaves out those it cannot use (``clients.unused_clients``), so with them ``÷ beam`` falls
   well under 1.0.
   The run says whether they are installed.
2. **The demo build.**  The project's files (``git ls-files``: tracked and untracked, not ignored)
   are copied to a temporary git work tree, where ``dvc repro`` builds the demo once (untimed: it
   fills DVC's cache and numba's), then ``dvc repro -f`` reruns every stage (timed; 3 runs, 1 with
   ``--quick``).  **The reference is the stages' own work**, the ``done in X s`` each prints (the
   release's ``in X s``), summed: ``wall ÷ own`` is the goal's ratio (at most 2).  Every output
   line is timestamped as it arrives, which splits a stage's time into its own work, the rest of
   its command (start-up, reading flags and params, exit) from DVC's ``> cmd`` line to the
   command's last line, and DVC's share: before the command (``Running stage``) and after it
   (hashing the outputs, caching them, the run cache, rewriting ``dvc.lock``) up to the next stage.
   The commands are the installed ``crisscross``; the copy only holds the data, params and the code
   DVC hashes, so the project's own ``build/`` and ``dvc.lock`` are never touched.
3. **The frozen import.**  In that copy, ``sample`` and ``aggregate`` run whole, as ``crisscross``
   runs them (what the import made frozen, ``cli.import_stage``) and with ``cli.main(freeze=False)``
   exiting the same way, alternating, 7 rounds (``--quick``: 2).  **The reference is the unfrozen
   command in the same run**; the ratio is frozen ÷ unfrozen.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import save_result
from crisscross.pipelines.clients import SERVICE_CLIENTS
from crisscross.pipelines.registry import module_of, stages

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "tensorflow", "matplotlib", "faiss", "sentence_transformers", "fastapi", "scipy", "numba", "mlcroissant")
ROUNDS, QUICK_ROUNDS = 7, 3
REPROS, QUICK_REPROS = 3, 1
GOAL_START_S = 1.0  # a stage that does nothing
GOAL_WALL_OVER_OWN = 2.0  # dvc repro -f of the demo against its stages' own work
OWN = re.compile(r"^([\w-]+): .*?\bin ([\d.]+)s, peak RSS")  # "<stage>: done in X s, peak RSS …" (release: "<name> <version> in X s")
DVC_LINE = re.compile(r"^(Running stage '|> |Updating lock file|Generating lock file|Use `dvc push`|Stage '.*' didn't change)")


def environment() -> dict[str, str]:
    """The running interpreter's scripts first on PATH (``crisscross``, ``dvc``), DVC's analytics
    off, and Python's bytecode cache on as Python ships it: a ``PYTHONDONTWRITEBYTECODE`` in the
    calling shell (some sandboxes set it) would make every command compile the project's modules
    anew, about 0.09 s each here, which no installed copy pays after its first run."""
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def wall(command: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one run of ``command``, its output discarded."""
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=ROOT, env=env)
    return time.perf_counter() - started


def startup(rounds: int, env: dict[str, str]) -> dict[str, list[float]]:
    """Seconds of every command per round: the references and ``crisscross <stage> --help``."""
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "import apache_beam": [sys.executable, "-c", "import apache_beam, os; os._exit(0)"],
        **{stage: ["crisscross", stage, "--help"] for stage in stages()},
    }
    names = list(commands)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            seconds[name].append(wall(commands[name], env))
        print(f"start-up round {r + 1}/{rounds} done", flush=True)
    return seconds


def heavy_imports(stage: str, env: dict[str, str]) -> list[str]:
    """The ``HEAVY`` libraries a fresh process has loaded after importing the stage's module."""
    module = module_of(stage)
    code = f"import sys, {module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env).stdout.split()


def copy_project(target: Path, env: dict[str, str]) -> None:
    """The project's files as a user's work tree has them, in a fresh git repository (DVC needs one)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in listed.stdout.splitlines():
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    for command in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.email=b@b", "-c", "user.name=b", "commit", "-qm", "copy"],
    ):
        subprocess.run(command, cwd=target, check=True, env=env)


def timed_lines(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, list[tuple[float, str]]]:
    """Wall seconds of ``command`` and each output line (stdout and stderr) with its arrival time."""
    started = time.perf_counter()
    lines: list[tuple[float, str]] = []
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert process.stdout is not None
    for line in process.stdout:
        lines.append((time.perf_counter() - started, line.rstrip("\n")))
    code = process.wait()
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{' '.join(command)} failed with exit {code}; the end of its output:\n" + "\n".join(t for _, t in lines[-15:]))
    return seconds, lines


def stage_times(lines: list[tuple[float, str]], seconds: float) -> list[dict[str, Any]]:
    """Per DVC stage: its own work, the rest of its command, and DVC's time before and after it."""
    starts = [i for i, (_, text) in enumerate(lines) if text.startswith("Running stage '")]
    stages = []
    for n, first in enumerate(starts):
        end = lines[starts[n + 1]][0] if n + 1 < len(starts) else seconds
        segment = lines[first : starts[n + 1] if n + 1 < len(starts) else len(lines)]
        launched = next(t for t, text in segment if text.startswith("> "))
        output = [(t, text) for t, text in segment if text.strip() and not DVC_LINE.match(text)]  # DVC ends a stage with a blank line
        finished = output[-1][0] if output else launched
        own = [float(m.group(2)) for _, text in output if (m := OWN.match(text))]
        stages.append(
            {
                "stage": segment[0][1].split("'")[1],
                "own_s": own[-1] if own else 0.0,
                "command_s": finished - launched,
                "dvc_before_s": launched - segment[0][0],
                "dvc_after_s": end - finished,
            }
        )
    return stages


# Two stage commands timed whole, as ``crisscross`` runs them (imports frozen) and with the imports
# left to the collector (``cli.main(freeze=False)``, exiting the same way), in the demo copy.
FROZEN_STAGES = {
    "sample": ["sample", "--in", "build/similarity", "--items", "build/items", "--params", "params.yaml"],
    "aggregate": ["aggregate", "--in", "build/judgments", "--tasks", "build/tasks", "--params", "params.yaml"],
}
UNFROZEN = "import os, sys; from crisscross.pipelines import cli; code = cli.main(sys.argv[1:]); sys.stdout.flush(); os._exit(code)"
FREEZE_ROUNDS, QUICK_FREEZE_ROUNDS = 7, 2


def frozen_or_not(project: Path, rounds: int, env: dict[str, str]) -> dict[str, dict[str, list[float]]]:
    """Wall seconds of each of :data:`FROZEN_STAGES`, frozen and not, alternating round by round."""
    seconds: dict[str, dict[str, list[float]]] = {stage: {"frozen": [], "collected": []} for stage in FROZEN_STAGES}
    for r in range(rounds):
        for stage, args in FROZEN_STAGES.items():
            out = ["--out", str(project / "freeze-check" / stage)]
            commands = {"frozen": ["crisscross", *args, *out], "collected": [sys.executable, "-c", UNFROZEN, *args, *out]}
            for variant in sorted(commands, reverse=r % 2 == 1):
                started = time.perf_counter()
                subprocess.run(commands[variant], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=project, env=env)
                seconds[stage][variant].append(time.perf_counter() - started)
        print(f"freeze round {r + 1}/{rounds} done", flush=True)
    return seconds


def demo_build(repros: int, freeze_rounds: int, env: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, dict[str, list[float]]]]:
    """``dvc repro -f`` of the demo, ``repros`` times, in a copy warmed by one ``dvc repro``; then
    :func:`frozen_or_not` in that copy."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="crisscross-startup-") as tmp:
        project = Path(tmp) / "main"
        copy_project(project, env)
        warm, _ = timed_lines(["dvc", "repro"], project, env)
        print(f"dvc repro (warm-up, untimed): {warm:.0f} s", flush=True)
        for r in range(repros):
            seconds, lines = timed_lines(["dvc", "repro", "-f"], project, env)
            stages = stage_times(lines, seconds)
            first = lines[next(i for i, (_, text) in enumerate(lines) if text.startswith("Running stage '"))][0]
            own = sum(s["own_s"] for s in stages)
            runs.append({"wall_s": seconds, "own_s": own, "dvc_start_s": first, "stages": stages})
            print(f"dvc repro -f {r + 1}/{repros}: {seconds:.1f} s wall, {own:.1f} s own work ({seconds / own:.2f}×)", flush=True)
        freeze = frozen_or_not(project, freeze_rounds, env)
    return runs, freeze


def median_per_stage(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each stage's times, the median of every figure over the runs."""
    by_stage = [{s["stage"]: s for s in r["stages"]} for r in runs]
    keys = ("own_s", "command_s", "dvc_before_s", "dvc_after_s")
    return {name: {key: statistics.median(stages[name][key] for stages in by_stage) for key in keys} for name in by_stage[0]}


def installed_clients() -> list[str]:
    """The service clients (``clients.SERVICE_CLIENTS``) installed here: Beam imports them at start-up."""

    def found(package: str) -> bool:
        try:
            return importlib.util.find_spec(package) is not None
        except ImportError:  # not even the namespace (``google``)
            return False

    return [package for clients in SERVICE_CLIENTS if found(clients.probe) for package in clients.packages]


def run(args: argparse.Namespace) -> None:
    env = environment()
    clients = installed_clients()
    seconds = startup(QUICK_ROUNDS if args.quick else ROUNDS, env)
    heavy = {stage: heavy_imports(stage, env) for stage in stages()}
    runs, freeze = demo_build(QUICK_REPROS if args.quick else REPROS, QUICK_FREEZE_ROUNDS if args.quick else FREEZE_ROUNDS, env)
    report(seconds, heavy, runs, freeze, clients, args.quick)


def report(
    seconds: dict[str, list[float]],
    heavy: dict[str, list[str]],
    runs: list[dict[str, Any]],
    freeze: dict[str, dict[str, list[float]]],
    clients: list[str],
    quick: bool,
) -> None:
    median = {name: statistics.median(values) for name, values in seconds.items()}
    bare, beam = median["python -c pass"], median["import apache_beam"]
    print(f"\nreferences (median of {len(seconds[next(iter(seconds))])}): python -c pass {bare:.2f} s, import apache_beam {beam:.2f} s")
    installed = f"{', '.join(clients)}: import apache_beam loads them, a stage command only those it can use" if clients else "none"
    print(f"service clients installed (google.cloud: the dataflow extra): {installed}")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("PYTHONDONTWRITEBYTECODE is set in this shell; the commands ran without it (bytecode cached, as installed)")
    print(f"{'stage':<12}{'--help s':>9}{'÷ beam':>8}  heavy libraries loaded by importing the stage")
    for stage, libraries in heavy.items():
        print(f"{stage:<12}{median[stage]:9.2f}{median[stage] / beam:8.2f}  {' '.join(libraries) or '–'}")
    met = [stage for stage in heavy if median[stage] <= GOAL_START_S]
    print(f"goal: a stage that does nothing ≤ {GOAL_START_S:.1f} s: {len(met)} of {len(heavy)} stages")

    per_stage = median_per_stage(runs)
    print(f"\ndvc repro -f of the demo, median per stage over {len(runs)} run(s)")
    print(f"{'stage':<18}{'own s':>7}{'command s':>11}{'start+exit s':>14}{'dvc s':>7}")
    for name, t in per_stage.items():
        print(
            f"{name:<18}{t['own_s']:7.2f}{t['command_s']:11.2f}{t['command_s'] - t['own_s']:14.2f}{t['dvc_before_s'] + t['dvc_after_s']:7.2f}"
        )
    total = {key: sum(t[key] for t in per_stage.values()) for key in ("own_s", "command_s", "dvc_before_s", "dvc_after_s")}
    dvc_start = statistics.median(r["dvc_start_s"] for r in runs)
    print(
        f"{'all':<18}{total['own_s']:7.2f}{total['command_s']:11.2f}{total['command_s'] - total['own_s']:14.2f}"
        f"{total['dvc_before_s'] + total['dvc_after_s']:7.2f}   (+ {dvc_start:.2f} s before DVC's first stage)"
    )
    ratios = [r["wall_s"] / r["own_s"] for r in runs]
    wall = statistics.median(r["wall_s"] for r in runs)
    print(
        f"wall {wall:.1f} s for {statistics.median(r['own_s'] for r in runs):.1f} s of own work: wall ÷ own {statistics.median(ratios):.2f} (goal ≤ {GOAL_WALL_OVER_OWN:.0f})"
    )
    print("\nwhole stage commands, the import frozen (crisscross) against left to the collector, medians:")
    for stage, variants in freeze.items():
        frozen, collected = statistics.median(variants["frozen"]), statistics.median(variants["collected"])
        print(f"{stage:<12}{frozen:6.2f} s against {collected:5.2f} s (×{frozen / collected:.2f})")
    path = save_result(
        "stage_startup",
        {
            "quick": quick,
            "cpu_count": os.cpu_count(),
            "load_average": os.getloadavg(),
            "service_clients_installed": clients,
            "caller_set_dont_write_bytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
            "startup_seconds": seconds,
            "startup_median_s": median,
            "heavy_imports": heavy,
            "goal_start_s": GOAL_START_S,
            "stages_within_goal": met,
            "repro_runs": runs,
            "repro_median_per_stage": per_stage,
            "wall_over_own": ratios,
            "frozen_or_not_seconds": freeze,
            "goal_wall_over_own": GOAL_WALL_OVER_OWN,
        },
    )
    print(f"→ {path}")
