"""Stage commands start fast: importing one loads no heavy library; those load when a stage uses them."""

from __future__ import annotations

import subprocess
import sys

from crisscross.pipelines.registry import module_of, stages

HEAVY = ("torch", "tensorflow", "matplotlib", "faiss", "sentence_transformers", "fastapi", "scipy", "numba", "mlcroissant")


def test_importing_every_stage_command_loads_no_heavy_library() -> None:
    modules = [module_of(name) for name in stages()]
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint(' '.join(h for h in {HEAVY!r} if h in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == [], f"importing the stage commands loaded {loaded}: import them inside the functions that use them"


def collections_while_importing(statement: str) -> list[str]:
    """The collector's passes (by generation) while ``statement`` runs in a fresh interpreter, then
    whether it is on afterwards."""
    code = (
        "import gc\n"
        "from crisscross.pipelines import cli\n"
        "passes = []\n"
        "gc.callbacks.append(lambda phase, info: passes.append(info['generation']) if phase == 'start' else None)\n"
        f"{statement}\n"
        "print(len(passes), gc.isenabled())\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def test_a_stage_module_is_imported_with_the_collector_paused_and_restored() -> None:
    plain = collections_while_importing("import crisscross.pipelines.derive")
    paused = collections_while_importing("cli.import_stage('crisscross.pipelines.derive')")
    assert int(plain[0]) > 100 and plain[1] == "True"  # what the pause saves: hundreds of passes
    assert int(paused[0]) <= 2 and paused[1] == "True"  # a library's explicit gc.collect() still runs
    assert collections_while_importing("gc.disable(); cli.import_stage('json')")[1] == "False"  # a caller's pause is kept


def test_the_command_freezes_what_it_imported_and_in_process_callers_do_not() -> None:
    code = (
        "import gc\n"
        "from crisscross.pipelines import cli\n"
        "cli.import_stage('crisscross.pipelines.derive')\n"
        "print(gc.get_freeze_count())\n"
        "cli.import_stage('crisscross.pipelines.sample', freeze=True)\n"
        "print(gc.get_freeze_count())\n"
    )
    before, after = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert before == 0 and after > 100_000  # Beam's objects, out of the collector's sight
