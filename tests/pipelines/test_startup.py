"""Stage commands start fast: importing one loads no heavy library; those load when a stage uses them."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crisscross.pipelines.clients import SERVICE_CLIENTS
from crisscross.pipelines.registry import module_of, stages

HIDDEN_BY_DEFAULT = " ".join(package for clients in SERVICE_CLIENTS for package in clients.packages)  # no service named
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


def test_a_command_keeps_the_clients_of_the_services_its_flags_or_params_name(tmp_path: Path) -> None:
    from crisscross.pipelines.clients import AMAZON, GOOGLE, MONGODB, unused_clients

    local, google, amazon = tmp_path / "local.yaml", tmp_path / "google.yaml", tmp_path / "amazon.yaml"
    local.write_text("embed:\n  text_encoders: [use-m3]\n")
    google.write_text("embed:\n  text_encoders:\n    - {name: mine, kind: precomputed, path: gs://bucket/vectors.npy}\n")
    amazon.write_text("embed:\n  text_encoders:\n    - {name: mine, kind: precomputed, path: S3://bucket/vectors.npy}\n")
    g, a, m = GOOGLE.packages, AMAZON.packages, MONGODB.packages
    every = g + a + m
    assert unused_clients(["--in", "build/items", "--out", "build/x", "--params", str(local), "--direct_num_workers=2"]) == every
    assert unused_clients(["--in", "build/items", "--params", str(tmp_path / "absent.yaml")]) == every  # the stage says it is missing
    assert unused_clients(["--in", "build/items", "--runner=DataflowRunner"]) == unused_clients(["--runner", "dataflow"]) == a + m
    assert unused_clients(["--in", "gs://bucket/items", "--out", "build/x"]) == unused_clients(["--temp_location=gs://b/tmp"]) == a + m
    assert unused_clients(["--in", "build/items", "--params", str(google)]) == unused_clients([f"--params={google}"]) == a + m
    assert unused_clients(["--in", "s3://bucket/items"]) == unused_clients(["--params", str(amazon)]) == g + m
    assert unused_clients(["--in", "mongodb://db/items"]) == unused_clients(["--in", "MongoDB+srv://db/x"]) == g + a
    assert unused_clients(["--in", "s3://bucket/items", "--runner=DataflowRunner", "--out=mongodb://db/x"]) == ()
    assert unused_clients(["--par", str(google)]) == unused_clients([f"--param={google}"]) == a + m  # argparse's abbreviations


def cloud_modules_after(statement: str) -> list[str]:
    """Google's cloud client modules loaded (``google.cloud.storage`` and the like) after ``statement``
    runs in a fresh interpreter, then whether the GCS filesystem serves ``gs://`` after importing it."""
    code = (
        "import sys\n"
        "from crisscross.pipelines import cli\n"
        "try:\n"
        f"    {statement}\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('google.cloud.'))[:3])\n"
        "import apache_beam.io.gcp.gcsfilesystem\n"
        "from apache_beam.io.filesystems import FileSystems\n"
        "print(type(FileSystems.get_filesystem('gs://bucket/x')).__name__)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Failed to import" not in run.stderr, run.stderr  # Beam's warning when a client half-imports
    return run.stdout.splitlines()[-2:]  # after the help text, if the statement printed one


def test_a_local_command_imports_beam_without_the_cloud_clients_and_they_stay_importable() -> None:
    pytest.importorskip("google.cloud.storage", reason="the cloud clients are Beam's gcp extra: the dataflow extra")
    local = cloud_modules_after("cli.main(['derive', '--debug', '--help'])")  # --debug: Beam's warnings reach stderr
    dataflow = cloud_modules_after("cli.main(['derive', '--runner=DataflowRunner', '--help'])")
    assert local == ["[]", "GCSFileSystem"]  # none loaded; gs:// still served once asked for
    assert dataflow[0] != "[]" and dataflow[1] == "GCSFileSystem"
    code = (  # a client loaded before (an in-process caller's) is the same module afterwards, not a second copy
        "import sys\nimport google.cloud.storage as storage\nfrom crisscross.pipelines import cli\n"
        "cli.import_stage('crisscross.pipelines.derive', hidden=('google.cloud',))\nprint(sys.modules['google.cloud.storage'] is storage)"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() == ["True"]


def test_a_command_without_s3_paths_imports_beam_without_boto3() -> None:
    pytest.importorskip("boto3", reason="Beam imports boto3 at start-up only where it is installed")
    code = (
        "import sys\nfrom crisscross.pipelines import cli\ntry:\n    cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print('boto3' in sys.modules)\nimport boto3\n"
    )
    runs = {
        flag: subprocess.run([sys.executable, "-c", code, "derive", "--debug", "--help", *flag], capture_output=True, text=True, check=True)
        for flag in ((), ("--in=s3://bucket/x",))
    }
    assert all("Failed to import" not in run.stderr for run in runs.values()), [run.stderr for run in runs.values()]
    assert [run.stdout.split()[-1] for run in runs.values()] == ["False", "True"]  # boto3 stays importable after the import


def test_a_command_without_mongodb_urls_imports_beam_without_its_mongodb_client_nor_its_bigquery_connector() -> None:
    """MongoDB's client is Beam's own requirement, and Beam imports its BigQuery connector whether or not
    Google's clients are installed: a command that names neither service starts without them, Beam's
    warning that the MongoDB client is missing is not shown (even with ``--debug``), and both stay
    importable afterwards."""
    code = (
        "import sys\nfrom crisscross.pipelines import cli\ntry:\n    cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(*(m in sys.modules for m in ('pymongo', 'apache_beam.io.gcp.bigquery')))\n"
        "import pymongo, apache_beam.io.gcp.bigquery\nprint(apache_beam.io.gcp.bigquery.WriteToBigQuery.__name__)\n"
    )
    runs = {
        flag: subprocess.run([sys.executable, "-c", code, "derive", "--debug", "--help", *flag], capture_output=True, text=True, check=True)
        for flag in ((), ("--in=mongodb://db/x",), ("--in=gs://bucket/x",))
    }
    assert all("bson" not in run.stderr and "Failed to import" not in run.stderr for run in runs.values()), [
        r.stderr for r in runs.values()
    ]
    assert [run.stdout.splitlines()[-2:] for run in runs.values()] == [
        ["False False", "WriteToBigQuery"],
        ["True False", "WriteToBigQuery"],
        ["False True", "WriteToBigQuery"],
    ]


def test_a_command_s_pipeline_reading_and_writing_files_loads_none_of_the_hidden_clients(tmp_path: Path) -> None:
    """Reading or writing files makes Beam import its Pub/Sub module when the pipeline is built, long
    after the command's start-up: it is imported at start-up with the clients hidden
    (``ServiceClients.later``), so the run loads none of them; a ``gs://`` flag keeps Google's."""
    pytest.importorskip("google.cloud.pubsub", reason="Google's clients are Beam's gcp extra: the dataflow extra")
    code = (
        "import os, sys\nfrom crisscross.pipelines import cli\n"
        "def run(args):\n"
        "    import apache_beam as beam, pyarrow as pa, pyarrow.parquet as pq\n"
        f"    folder = {str(tmp_path)!r}\n"
        "    pq.write_table(pa.table({'x': [1, 2]}), os.path.join(folder, 'in.parquet'))\n"
        "    with beam.Pipeline() as p:\n"
        "        rows = p | beam.io.ReadFromParquet(os.path.join(folder, 'in.parquet')) | beam.Map(str)\n"
        "        rows | beam.io.WriteToText(os.path.join(folder, 'out'))\n"
        "    loaded = {m for m in sys.modules if m.startswith(('google.cloud.', 'apitools', 'pymongo', 'bson'))}\n"
        "    print(sorted({m.split('.')[0] if not m.startswith('google.') else '.'.join(m.split('.')[:3]) for m in loaded}))\n"
        "stage = type('Stage', (), {'main': staticmethod(run)})\n"
        "imported = cli.import_stage\n"
        "cli.import_stage = lambda name, **kwargs: imported('apache_beam', **kwargs) and stage\n"
        "cli.main(['derive', '--debug', *sys.argv[1:]])\n"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code, *flags], capture_output=True, text=True, check=True, timeout=300)
        for flags in ((), ("--in=gs://bucket/x",))
    ]
    assert runs[0].stdout.splitlines()[-1] == "[]", runs[0].stderr[-2000:]
    assert "google.cloud.pubsub" in runs[1].stdout.splitlines()[-1], runs[1].stderr[-2000:]  # the control: Beam loads it


def test_a_command_that_runs_no_pipeline_starts_without_beam() -> None:
    code = (
        "import sys\nfrom crisscross.pipelines import cli\nfrom crisscross.pipelines.clients import unused_clients\n"
        "from crisscross.pipelines.registry import module_of\n"
        "for name in ('browse', 'worker-pool', 'derive'):\n"
        "    cli.import_stage(module_of(name), hidden=unused_clients([]))\n"
        "    print('apache_beam' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["False", "False", "True"]


def test_a_command_runs_its_stage_with_its_hidden_clients_told_to_local_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    from crisscross.pipelines import cli
    from crisscross.pipelines.clients import HIDDEN_ENV

    told = []

    class Stage:
        @staticmethod
        def main(args: list[str]) -> None:
            told.append(os.environ.get(HIDDEN_ENV))

    monkeypatch.setattr(cli, "import_stage", lambda *args, **kwargs: Stage)
    monkeypatch.delenv(HIDDEN_ENV, raising=False)
    assert (
        cli.main(["derive", "--debug", "--in", "build/x"])
        == cli.main(["derive", "--debug", "--in", "s3://b/x", "--runner=DataflowRunner"])
        == 0
    )
    assert told == [HIDDEN_BY_DEFAULT, "pymongo bson"] and HIDDEN_ENV not in os.environ  # told while the stage runs, and only then
    monkeypatch.setenv(HIDDEN_ENV, "before")
    assert cli.main(["derive", "--debug", "--in", "gs://b/x"]) == 0
    assert told[-1] == "boto3 pymongo bson" and os.environ[HIDDEN_ENV] == "before"  # a value set before is put back


def test_local_worker_processes_start_as_their_command_did() -> None:
    """Other processes, running ``stage.LOCAL_WORKER`` with Beam's objects frozen, without the
    clients the command hid (where they are installed: without them that part holds trivially)."""
    from crisscross.pipelines.clients import HIDDEN_ENV
    from crisscross.pipelines.stage import LOCAL_WORKER

    code = (
        "import gc, os, sys\n"
        "import apache_beam as beam\n"
        "from crisscross.pipelines.stage import make_pipeline\n"
        "def where(x):\n"
        "    loaded = tuple(m for m in ('google.cloud.storage', 'boto3', 'pymongo', 'apache_beam.io.gcp.bigquery') if m in sys.modules)\n"
        "    return os.getpid(), sys.modules['__main__'].__spec__.name, gc.get_freeze_count() > 0, loaded\n"
        "with make_pipeline(['--direct_num_workers=2', '--direct_running_mode=multi_processing']) as p:\n"
        "    seen = p | beam.Create(range(8)) | beam.Reshuffle() | beam.Map(where) | beam.combiners.ToList()\n"
        "    seen | beam.Map(lambda seen: print(sorted(set(seen)), flush=True))\n"
        "print(os.getpid())\n"
    )
    env = {**os.environ, HIDDEN_ENV: HIDDEN_BY_DEFAULT}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, timeout=300)
    assert "Failed to import" not in run.stderr and "bson" not in run.stderr, run.stderr[-2000:]  # nor Beam's warning of a hidden client
    *_, seen, parent = run.stdout.splitlines()
    workers = ast.literal_eval(seen)
    assert workers and all(pid != int(parent) for pid, *_ in workers), workers
    assert {(module, frozen, loaded) for _, module, frozen, loaded in workers} == {(LOCAL_WORKER, True, ())}, workers


def test_a_command_runs_its_pipelines_without_importing_ipython_unless_it_is_loaded(tmp_path: Path) -> None:
    """Beam imports IPython when a pipeline runs (to ask whether it runs inside an IPython session).
    A stand-in IPython on the path shows when it is imported: not by the pipeline a command runs;
    by the same pipeline run outside a command (the control); and a session loaded before the
    command (a notebook's) is the one Beam finds while the stage runs."""
    site = tmp_path / "site"
    (site / "IPython").mkdir(parents=True)
    (site / "IPython" / "__init__.py").write_text("import os\n\ndef get_ipython():\n    return os.environ.get('IN_A_SESSION')\n")
    code = (
        "import os, sys\n"
        "if os.environ.get('IN_A_SESSION'):\n"
        "    import IPython\n"
        "from crisscross.pipelines import cli\n"
        "def run(args=()):\n"
        "    import apache_beam as beam\n"
        "    from apache_beam.utils.interactive_utils import is_in_ipython\n"
        "    if not os.environ.get('IN_A_SESSION'):  # in one, Beam's interactive mode would need a real IPython\n"
        "        with beam.Pipeline() as p:\n"
        "            p | beam.Create([1])\n"
        "    print('IPython' in sys.modules, is_in_ipython(), flush=True)\n"
        "stage = type('Stage', (), {'main': staticmethod(run)})\n"
        "imported = cli.import_stage  # Beam imported as a command imports it (Google's BigQuery client imports IPython)\n"
        "cli.import_stage = lambda name, **kwargs: imported('apache_beam', **kwargs) and stage\n"
        "cli.main(['derive', '--debug'])\n"
        "run()\n"
    )
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    runs = {
        session: subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": path, "IN_A_SESSION": session},
            timeout=300,
        )
        for session in ("", "yes")
    }
    assert runs[""].stdout.split() == ["False", "False", "True", "False"], runs[""].stderr[-2000:]
    assert runs["yes"].stdout.split() == ["True", "True", "True", "True"], runs["yes"].stderr[-2000:]


def test_an_ipython_session_the_process_has_loaded_stays_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    from crisscross.pipelines.clients import IPYTHON, unused_shell

    monkeypatch.delitem(sys.modules, IPYTHON, raising=False)
    assert unused_shell() == (IPYTHON,)
    monkeypatch.setitem(sys.modules, IPYTHON, sys)  # loaded: it may be running, so Beam must find it
    assert unused_shell() == ()
