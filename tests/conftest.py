"""Shared fixtures: the real data in ``../shared/data`` (skipped, with the reason shown, if absent);
the rater databases, SQLite and the run's scratch PostgreSQL (never skipped)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import crisscross  # noqa: F401  (first of the project: it sets the numeric policy before numpy or torch load)
from tests import scratch_postgres

if TYPE_CHECKING:
    from crisscross.annotate.store import Store

PROJECT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CRISSCROSS_SHARED_DATA", PROJECT.parent / "shared" / "data"))
DEMO = PROJECT / "data" / "demo"


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the run's main process, not an xdist worker
        scratch_postgres.claim_run()


def pytest_unconfigure(config: pytest.Config) -> None:
    scratch_postgres.release_run()  # only the process that claimed the run stops its server


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The figures tests measured (``record_property("figure", ...)``), shown after the run, xdist or not."""
    figures = [(r.nodeid, value) for r in terminalreporter.stats.get("passed", []) for key, value in r.user_properties if key == "figure"]
    if figures:
        terminalreporter.section("figures")
        for nodeid, value in figures:
            terminalreporter.line(f"{nodeid}: {value}")


@pytest.fixture(scope="session")
def postgres_server() -> scratch_postgres.Server:
    """The run's scratch PostgreSQL (``tests/scratch_postgres.py``); the tests that need it fail,
    saying why, when it cannot start: never a skip."""
    try:
        return scratch_postgres.shared()
    except scratch_postgres.Unavailable as error:
        reason = str(error)
    pytest.fail(f"PostgreSQL: {reason}", pytrace=False)


@pytest.fixture
def postgres_database(postgres_server: scratch_postgres.Server) -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database of this test's own."""
    with postgres_server.database() as url:
        yield url


# The store's backends, each as a new empty database's location for one test.
DATABASES: dict[str, Callable[[pytest.FixtureRequest], str]] = {
    "sqlite": lambda request: str(request.getfixturevalue("tmp_path") / "judgments.sqlite"),
    "postgresql": lambda request: request.getfixturevalue("postgres_database"),
}


@pytest.fixture(params=list(DATABASES))
def database(request: pytest.FixtureRequest) -> str:
    """A new, empty rater database, once on each backend of the store: every test of the store or
    the app runs on both."""
    return DATABASES[request.param](request)


@pytest.fixture
def store(database: str) -> Store:
    """The rater app's store set up with the small round of ``tests/serve/round.py``, on each backend."""
    from tests.serve.round import make_store

    return make_store(database)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Root of the real datasets; tests that need it skip visibly when it is missing."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (set CRISSCROSS_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def test_photos(shared_data: Path) -> Path:
    return shared_data / "coco-images" / "karpathy-test"


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    return DEMO


@pytest.fixture(scope="session")
def char_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    """Two tiny TF SavedModels hashing characters into 16 buckets (one returns a tensor, one a
    dict): a local stand-in for a TF-Hub text model, since hub handles cannot be fetched here."""
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("tensorflow_hub")

    class CharBag(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, texts: Any) -> Any:
            buckets = tf.strings.to_hash_bucket_fast(tf.strings.unicode_split(texts, "UTF-8"), 16)
            return tf.reduce_sum(tf.one_hot(buckets, 16), axis=1) / 3.0

    class CharBagDict(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bag = CharBag()

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, texts: Any) -> Any:
            bag = self.bag(texts)
            return {"default": tf.cast(bag, tf.float64), "count": tf.reduce_sum(bag, axis=1)}

    root = tmp_path_factory.mktemp("tfhub")
    module = CharBag()
    tensor_dir, dict_dir = root / "bag", root / "bag-dict"
    tf.saved_model.save(module, str(tensor_dir))
    tf.saved_model.save(CharBagDict(), str(dict_dir))
    return tensor_dir, dict_dir, module


@pytest.fixture(scope="session")
def demo_chain(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ingest → embed → similarity → sample on the embedded demo with the project's params, once per
    run (``tests/shared_builds.py``), copied into this session's own folder:
    ``<root>/build/{items,embeddings,similarity,candidates}`` (tests add their own folders)."""
    import shutil

    from crisscross.pipelines import embed, ingest, sample, similarity
    from tests.shared_builds import shared_build

    def chain(root: Path) -> None:
        build, params = root / "build", ["--params", str(PROJECT / "params.yaml")]
        ingest.main(
            ["--in", str(demo_dir / "captions.jsonl"), "--images", str(demo_dir / "images"), "--out", str(build / "items"), *params]
        )
        embed.main(["--in", str(build / "items"), "--out", str(build / "embeddings"), *params])
        similarity.main(["--in", str(build / "embeddings"), "--out", str(build / "similarity"), *params])
        sample.main(["--in", str(build / "similarity"), "--items", str(build / "items"), "--out", str(build / "candidates"), *params])

    built = shared_build(tmp_path_factory, "demo-chain", [PROJECT / "params.yaml", demo_dir / "captions.jsonl", demo_dir / "images"], chain)
    build = tmp_path_factory.mktemp("demo-chain") / "build"
    shutil.copytree(built / "build", build)
    return build


def replay_cxc(shared_data: Path, root: Path, split: str) -> tuple[dict, dict]:
    """A CxC release split replayed as a round: its items as ``<root>/tasks``, then ``annotate``
    (``source: replay``, the release files as judgments) and ``aggregate``; their reports."""
    import json

    from crisscross.annotate.providers import load_cxc_release
    from crisscross.core import io
    from crisscross.pipelines import aggregate, annotate

    release = load_cxc_release(shared_data / "cxc", split)
    assert release.rejected == []
    io.write_parquet(str(root / "tasks" / "tasks.parquet"), release.items)
    params = root / "replay-params.json"
    params.write_text(json.dumps({"annotate": {"source": "replay", "replay_split": split}}))
    p = ["--params", str(params)]
    collected = annotate.main(
        ["--in", str(root / "tasks"), "--judgments", f"cxc:{shared_data / 'cxc'}", "--out", str(root / "judgments"), *p]
    )
    rated = aggregate.main(["--in", str(root / "judgments"), "--tasks", str(root / "tasks"), "--out", str(root / "rated"), *p])
    return collected, rated


@pytest.fixture(scope="session")
def cxc_test_replay(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CxC test release replayed through annotate and aggregate (:func:`replay_cxc`), once per run
    (``tests/shared_builds.py``): ``<root>/{tasks,judgments,rated}`` with their reports. Tests only read it."""
    from tests.shared_builds import shared_build

    return shared_build(tmp_path_factory, "cxc-test-replay", [shared_data / "cxc"], lambda root: replay_cxc(shared_data, root, "test"))


@pytest.fixture(scope="session")
def demo_repro(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the Quickstart's first command makes, once per run (``tests/shared_builds.py``): a git
    copy of the project at ``<root>/main``, committed, whose ``dvc repro`` ran from a fresh state
    (no ``dvc.lock``, no build) under the salt ``DEMO_SALT``; its output is in ``<root>/repro.out``.
    Tests only read it: ``copy_built_project`` gives a copy to work in."""
    import subprocess

    from tests.shared_builds import git_copy, project_env, shared_build

    def repro(root: Path) -> None:
        env = project_env()
        project = git_copy(PROJECT, root / "main", env)
        (project / "dvc.lock").unlink(missing_ok=True)
        run = subprocess.run(["dvc", "repro"], check=False, cwd=project, capture_output=True, text=True, env=env)
        assert run.returncode == 0, f"dvc repro exited {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
        (root / "repro.out").write_text(run.stdout)

    return shared_build(tmp_path_factory, "demo-repro", [PROJECT / "dvc.yaml", PROJECT / "params.yaml"], repro)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """How ``--dist loadgroup`` (the default run, ``pyproject.toml``) shares the tests out between
    the two workers: a test marked ``xdist_group("<name>")`` runs on the worker that runs the rest of
    its group, one after another ("e2e": whole builds through DVC or the README; "karpathy": the real
    test split's build and what reads it); the tests of a module that share a module-scoped fixture
    go to one worker together (so it is built once, not once per worker, nor again after a test of
    another module ran in between); the marked groups start first, then the modules, then single
    tests fill in (``--no-loadscope-reorder`` keeps this order).

    xdist marks a group by a ``@<group>`` suffix on the node ids, which pytest-xdist 3.8 writes to
    ``item._nodeid``; pytest 9.2 keeps node ids in ``item._id`` and ignores that, so groups silently
    stop working (pytest-dev/pytest-xdist#1386): the suffix is set here."""
    if not getattr(config.option, "loadgroup", False):  # True only on an xdist worker under --dist loadgroup
        return
    try:
        from _pytest.nodes import NodeId
    except ImportError:  # pytest before 9.2: the node id is item._nodeid
        NodeId = None

    rank: dict[str, int] = {}
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")})
        group, order = "_".join(names), 0
        fixtures = getattr(item, "_fixtureinfo", None)
        scopes = {d[-1].scope for d in fixtures.name2fixturedefs.values() if d} if fixtures is not None else set()
        if not group and scopes & {"module", "class", "package"}:
            group, order = item.nodeid.split("::")[0].removeprefix("tests/").removesuffix(".py"), 1
        if group:
            if not item.nodeid.endswith(f"@{group}"):
                if NodeId is not None and isinstance(getattr(item, "_id", None), NodeId):
                    item._id = NodeId.parse(f"{item.nodeid}@{group}")
                else:
                    item._nodeid = f"{item.nodeid}@{group}"
            rank[item.nodeid] = order
    # A worker is given its next unit when two of its tests are left: within the marked groups the
    # later modules, which hold the longest builds (the README's, the shared ones' first users), go first.
    position = {item.nodeid: i for i, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(item.nodeid, 2), -position[item.nodeid] if rank.get(item.nodeid) == 0 else position[item.nodeid]))
