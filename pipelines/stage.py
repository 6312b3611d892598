"""What every stage program shares: its command line, params, Beam options, staging, summary.

A stage is ``crisscross <stage> --in PATH --out DIR [--params FILE] [stage flags] [Beam flags]``.
Flags the stage does not know are Beam pipeline options (``--runner``, ``--direct_num_workers``,
Dataflow flags) and pass through to Beam.  Without ``--runner`` Beam's ``FnApiRunner`` runs the
job, in this process or on local worker processes (Beam's ``DirectRunner`` would try to download
the Prism binary); a stage declared ``one_local_process`` runs in this process (:func:`for_the_runner`).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import resource
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

import apache_beam as beam
import pyarrow as pa
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions, TestOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms.environments import SubprocessSDKEnvironment

from crisscross.beam.common import gather, merge_quarantine, quarantine_shards, unpacking
from crisscross.core import io, numerics
from crisscross.core.errors import InputError, ParamError
from crisscross.core.quarantine import Rejected, RejectionError, count_reasons
from crisscross.core.settings import parse_params, setting, settings_from_params
from crisscross.pipelines.registry import Stage, stages

LOG = logging.getLogger("crisscross")
LOCAL_WORKER = "crisscross.pipelines.sdk_worker"  # the module a local worker process runs
MULTI_PROCESSING = "multi_processing"  # --direct_running_mode of local worker processes
T = TypeVar("T")


@dataclass
class StageArgs:
    """A stage's command line.  ``inputs``, ``out`` and every :func:`local_path` flag are absolute
    (workers of a portable runner start in other directories); reports name them with :meth:`shown`."""

    name: str
    inputs: str
    out: str
    settings: Any  # the stage's checked settings (its settings class): the one way a command reads params
    seed: int  # ``base.seed``: where every random step of the stage starts (``crisscross.core.rng``)
    flags: argparse.Namespace
    beam_args: list[str] = field(default_factory=list)
    root: str = field(default_factory=os.getcwd)  # the launching directory: outputs record paths relative to it
    notes: tuple[str, ...] = ()  # how the command changed what it was asked, for its summary

    def shown(self, path: str) -> str:
        """A path as reports and outputs name it: relative to the launching directory (the project root)."""
        return io.shown(path, self.root)

    def rejected_line(self, rejected: int, what: str = "") -> str:
        """The summary's ``rejected`` line: how many records the quarantine holds, and where it is."""
        return f"{rejected}{f' {what}' if what else ''} → {self.shown(io.join(self.out, QUARANTINE))}"


def local_path(value: str) -> str:
    """The argparse ``type`` of a flag naming a file or folder (or a ``name:path`` source): absolute."""
    return io.located(value)


def local_paths(value: str) -> list[str]:
    """The argparse ``type`` of a flag naming several folders, comma-joined: each absolute."""
    return [local_path(part) for part in value.split(",") if part]


def source_spec(value: str) -> str:
    """The argparse ``type`` of a ground-truth spec: a bare name (``coco``) as it is, the folders of
    ``name:folder[,folder…]`` absolute."""
    return io.located_source(value)


ROUNDS = "rounds"  # per-round overrides of stage sections (--round)
SHARED_SECTIONS = ("base", "data", ROUNDS)  # read by every stage / interpolated by dvc.yaml / overrides


def read_params(path: str | None) -> dict[str, Any]:
    """The params document; a file that is not UTF-8 YAML (:func:`~crisscross.core.settings.parse_params`:
    a key written twice, an alias …), or not a mapping, or that has a section no stage reads (a
    misspelt ``similarty:``) is a one-line error naming the file and line."""
    if not path:
        return {}
    try:
        data = io.read_bytes(path)  # a FIFO or a folder named params.yaml is refused, never waited on
    except FileNotFoundError as error:
        raise InputError(f"no params file {path}") from error
    except io.NotARegularFileError:
        raise
    except OSError as error:
        raise InputError(f"params file {path} cannot be read ({error.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ParamError(f"{path}:{line}: not UTF-8 text (byte {data[error.start]:#04x})") from None
    document = parse_params(text, path)
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ParamError(f"{path}: params must be a mapping of sections (base, data, one per stage), got {type(document).__name__}")
    named = sorted(stages())
    known = [*SHARED_SECTIONS, *named]
    unknown = sorted(str(s) for s in set(document) - set(known))
    if unknown:
        raise ParamError(f"{path}: unknown params section(s) {unknown}; known: {known}")
    rounds = document.get(ROUNDS) or {}
    if not isinstance(rounds, dict) or not all(isinstance(r, dict | None) for r in rounds.values()):
        raise ParamError(f"{path}: {ROUNDS} must map round names to sections per stage, e.g. {ROUNDS}: {{sits: {{tasks: {{}}}}}}")
    for name, sections in rounds.items():
        stray = sorted(str(s) for s in set(sections or {}) - set(named))
        if stray:
            raise ParamError(f"{path}: unknown stage section(s) {stray} in {ROUNDS}.{name}; known: {named}")
    return document


def load_params(path: str | None, section: str, cls: type[T], round_name: str | None = None) -> tuple[T, int]:
    """A params section as settings of ``cls``, every value checked at any depth
    (:mod:`crisscross.core.settings`), and the shared ``base.seed``.

    With ``round_name`` the section ``rounds.<round>.<stage>`` is laid over the stage's own
    (:func:`laid_over`), so one
    stage command serves several annotation rounds (CxC's STS/SIS round, then SITS; ECCV's VERIFY).
    Unknown keys are an error, so a typo in ``params.yaml`` cannot be silently ignored.
    """
    document = read_params(path)
    given = _section(document, section)
    if round_name:
        rounds = document.get(ROUNDS) or {}
        if round_name not in rounds:
            raise ParamError(f"{path or 'params'}: no params section {ROUNDS}.{round_name}; rounds: {sorted(rounds)}")
        overrides = _section(rounds[round_name] or {}, section)
        if not isinstance(given, Mapping) or not isinstance(overrides, Mapping):
            raise ParamError(f"{path or 'params'}: {section} and {ROUNDS}.{round_name}.{section} must be mappings")
        given, section = laid_over(given, overrides), f"{ROUNDS}.{round_name}.{section}"
    where = path or "params"
    base = settings_from_params(BaseSettings, _section(document, "base"), "base", where)
    fixed = {"seed": base.seed} if "seed" in {f.name for f in fields(cls)} else {}  # one home of the seed: base
    return settings_from_params(cls, given, section, where, **fixed), base.seed


def _section(sections: Mapping[str, Any], name: str) -> Any:
    """A section as written; left empty (``tasks:``), the class defaults."""
    given = sections.get(name)
    return {} if given is None else given


def laid_over(section: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A round's section over the stage's: each key replaced, a mapping key by key (a round that
    names ``replication: {rule: threshold}`` keeps the section's ``rater_sd``)."""
    return {
        **section,
        **{
            key: {**section[key], **value} if isinstance(value, Mapping) and isinstance(section.get(key), Mapping) else value
            for key, value in overrides.items()
        },
    }


@dataclass(frozen=True)
class BaseSettings:
    seed: int = setting(0, low=0, high=2**32 - 1)  # every random step starts from it (crisscross.core.rng)


def parse_args(
    stage: Stage,
    argv: list[str],
    settings: type,
    add_flags: Callable[[argparse.ArgumentParser], None] | None = None,
) -> StageArgs:
    """The command line of ``stage``, whose params section ``settings`` (a settings class) checks."""
    name = stage.name
    parser = argparse.ArgumentParser(
        prog=f"crisscross {name}",
        description=stage.description,
        epilog="Other --flags are Apache Beam pipeline options (e.g. --runner, --direct_num_workers).",
    )
    parser.add_argument("--in", dest="inputs", required=True, help="input file or directory")
    parser.add_argument("--out", required=True, help="output directory (replaced atomically on success)")
    parser.add_argument("--params", default=None, help=f"params YAML; its '{name}' and 'base' sections are read")
    parser.add_argument("--round", default=None, help=f"an annotation round: rounds.<round>.{name} is laid over the '{name}' section")
    if add_flags:
        add_flags(parser)
    flags, beam_args = parser.parse_known_args(argv)
    checked, seed = load_params(flags.params, name, settings, flags.round)
    beam_args, notes = for_the_runner(stage, beam_args)
    return StageArgs(name, local_path(flags.inputs), io.absolute(flags.out), checked, seed, flags, beam_args, notes=notes)


def for_the_runner(stage: Stage, beam_args: list[str]) -> tuple[list[str], tuple[str, ...]]:
    """``beam_args`` as ``stage`` runs them, and a note for its summary when they changed.

    A stage declared ``one_local_process`` runs in one process on Beam's local runner even when
    ``--direct_running_mode=multi_processing`` asks for more: its steps already use the cores of
    a process, so on one machine more processes would add their start-up, their own copy of the
    inputs and the shipping of records between them (all of COCO on two cores: similarity 3–5%
    longer on two processes than on one, ingest 6%).  A named ``--runner``'s workers are other
    machines, and keep their processes."""
    asked = worker_processes(beam_args)
    if not stage.one_local_process or asked == 1 or named_runner(beam_args):
        return beam_args, ()
    cores = os.cpu_count() or 1
    note = f"ran in one local process on its {cores} cores, not the {asked} processes asked for: on one machine a second process costs this stage more than it takes over"
    return [*beam_args, "--direct_running_mode=in_memory", "--direct_num_workers=1"], (note,)


def make_pipeline(beam_args: list[str]) -> beam.Pipeline:
    """The pipeline on the runner the flags name, else on Beam's local runner: in one process, or
    with ``--direct_running_mode=multi_processing`` on ``--direct_num_workers`` processes started as
    :data:`LOCAL_WORKER` (Beam's own mode would start each with the whole of Beam's import)."""
    options = PipelineOptions(beam_args)
    if named_runner(beam_args):
        return beam.Pipeline(options=options)
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode != MULTI_PROCESSING:
        return beam.Pipeline(runner=FnApiRunner(), options=options)
    direct.direct_running_mode = None  # else FnApiRunner puts its own worker command back
    # -P: the worker finds this package as the command did, never a folder of the same name in the working directory
    workers = SubprocessSDKEnvironment.from_command_string(f"{shlex.quote(sys.executable)} -P -m {LOCAL_WORKER}")
    return beam.Pipeline(runner=FnApiRunner(default_environment=workers), options=options)


def is_dry_run(beam_args: list[str]) -> bool:
    return bool(PipelineOptions(beam_args).view_as(TestOptions).dry_run)


@dataclass(frozen=True)
class Finished:
    """What a stage's report reads once the job has run: the staged output folder, the runner's
    result (for counters), the quarantine, and what the stage's build handed on (``built``).
    The quarantine is read as a table once; its records become objects only for a report that
    looks at them (a stage may hold millions)."""

    out: str
    result: Any
    built: Any = None

    @functools.cached_property
    def quarantine_table(self) -> pa.Table:
        return io.read_parquet(io.join(self.out, QUARANTINE))

    @property
    def quarantined(self) -> int:
        """How many records the quarantine holds."""
        return self.quarantine_table.num_rows

    @functools.cached_property
    def quarantine(self) -> list[Rejected]:
        return [Rejected(**row) for row in self.quarantine_table.to_pylist()]

    @property
    def rejected(self) -> dict[str, dict[str, int]]:
        """The quarantine counted by reason: every report's ``rejected``."""
        table = self.quarantine_table
        return count_reasons(zip(table.column("kind").to_pylist(), table.column("reason").to_pylist(), strict=True))


Build = Callable[[beam.Pipeline, str, StageArgs], Any]
Report = Callable[[Finished, StageArgs], dict[str, Any]]


def run_stage(stage: StageArgs, build: Build, report: Report) -> dict[str, Any]:
    """Build the pipeline into a staging directory, run it, and publish it only on success.

    ``build(pipeline, out_dir, stage)`` adds the stage's transforms and returns what the report
    needs beyond the outputs (or None); under ``--strict`` a quarantined record then fails the
    stage; ``report(finished, stage)`` reads the outputs and returns ``report.json``.
    """
    configure_logging()
    numerics.check(stage.name)  # the launcher is a worker too under the in-process runner
    started = time.perf_counter()
    if is_dry_run(stage.beam_args):
        pipeline = make_pipeline(stage.beam_args)
        build(pipeline, stage.out, stage)
        pipeline.run()
        print(f"{stage.name}: dry run — the job was translated, nothing ran and nothing was written")
        return {}
    with io.staged_directory(stage.out) as staging:
        pipeline = make_pipeline(stage.beam_args)
        built = build(pipeline, staging, stage)
        result = pipeline.run()
        result.wait_until_finish()
        finished = Finished(staging, result, built)
        check_strict(stage, finished.rejected)
        summary = report(finished, stage)
        io.write_json(io.join(staging, "report.json"), summary)
    print_summary(stage, summary, time.perf_counter() - started)
    return summary


def print_summary(stage: StageArgs, report: Mapping[str, Any], seconds: float) -> None:
    """Wall time and peak memory go to the terminal only: ``report.json`` stays byte-identical
    across runs.  With the in-process runner the peak RSS includes the workers."""
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines = [f"{stage.name}: done in {seconds:.1f}s, peak RSS {peak_mib:.0f} MiB → {stage.shown(stage.out)}"]
    lines += [f"  note: {note}" for note in stage.notes]
    for key, value in report.get("summary", {}).items():
        lines.append(f"  {key}: {value}")
    print("\n".join(lines), file=sys.stdout, flush=True)


def configure_logging() -> None:
    """Progress lines (INFO) on stderr.  ``force``: Beam's ``PipelineOptions`` calls
    ``logging.basicConfig()`` when the flags are parsed, which left the root logger at WARNING with
    its own handler, and every progress line was dropped."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S", force=True)
    beam_logger = logging.getLogger("apache_beam")
    if beam_logger.level == logging.NOTSET:  # the command quiets it further unless --debug
        beam_logger.setLevel(logging.WARNING)


QUARANTINE = "quarantine.parquet"
QUARANTINE_SHARDS = ".quarantine-shards"  # beside it while the job runs, deleted by the merge


def write_quarantine(rejected: beam.PCollection | tuple[beam.PCollection, ...], out: str, root: str | None = None) -> None:
    """Every stage's rejects, as one sorted table ``<out>/quarantine.parquet``; with ``root``
    (``StageArgs.root``) the files they came from are named relative to it.  Each collection of
    rejects is written in shards by the step that makes it, so only the shards' paths meet."""
    parts = rejected if isinstance(rejected, tuple) else (rejected,)
    folder = io.join(out, QUARANTINE_SHARDS)
    shards = [part | f"QuarantineShards[{n}]" >> beam.ParDo(quarantine_shards(folder, root)) for n, part in enumerate(parts)]
    gather("GatherRejected", shards | "AllShards" >> beam.Flatten()) | "WriteQuarantine" >> beam.Map(
        unpacking(merge_quarantine), folder, io.join(out, QUARANTINE)
    )


def counters(result: Any, namespace: str) -> dict[str, int]:
    """Committed counter values of one namespace, by name (summed over steps)."""
    query = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(namespace))
    out: dict[str, int] = {}
    for counter in query["counters"]:
        out[counter.key.metric.name] = out.get(counter.key.metric.name, 0) + int(counter.committed or counter.attempted or 0)
    return dict(sorted(out.items()))


def require(path: str, producer: str, hint: str = "") -> str:
    """``path`` if it exists, else the one "run stage X first" error."""
    if not io.exists(path):
        raise FileNotFoundError(f"no {path}: run the {producer} stage first{hint}")
    return path


def check_strict(stage: StageArgs, rejected: Mapping[str, Mapping[str, int]]) -> None:
    """Under ``--strict`` (or the section's ``strict: true``) any quarantined record fails the stage;
    the failed output keeps its quarantine for inspection."""
    strict = stage.flags.strict if getattr(stage.flags, "strict", None) is not None else getattr(stage.settings, "strict", False)
    if strict and rejected:
        raise RejectionError(stage.name, dict(rejected), stage.shown(str(io.failed_path(stage.out) / QUARANTINE)))


def named_runner(beam_args: list[str]) -> bool:
    """Whether the flags name a runner: its workers are other machines, which the command does not count."""
    return PipelineOptions(beam_args).view_as(StandardOptions).runner is not None


def in_this_process(beam_args: list[str]) -> bool:
    """Whether the pipeline runs in the command's own process, with no other worker to spread work to."""
    return not named_runner(beam_args) and worker_processes(beam_args) == 1


def worker_processes(beam_args: list[str]) -> int:
    """Worker processes sharing one machine's cores: the local multi-process runner's worker count, else 1."""
    direct = PipelineOptions(beam_args).view_as(DirectOptions)
    if direct.direct_running_mode == MULTI_PROCESSING:
        return direct.direct_num_workers or os.cpu_count() or 1
    return 1
