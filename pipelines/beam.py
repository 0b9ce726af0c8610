"""How the pipeline's Beam nodes run: named runner profiles, chosen per node and by data size.

The `beam:` block of a pipeline config:

    beam:
      profile: auto            # auto | direct | direct-multiprocess | portable | flink | spark | dataflow
      workers: 0               # direct-multiprocess / portable parallelism; 0 = one per core
      multiprocess_from_mb: 256  # auto: direct below this much input to a node, direct-multiprocess from it
      options: {}              # the profile's own options, as Beam names them (see PROFILE_OPTIONS)
      extra_args: []           # more Beam flags, passed as they are
      nodes:                   # per node, the same keys (profile, workers, options, extra_args)
        Evaluator: {profile: direct}

Each profile maps to `beam_pipeline_args` (`args_for`), set on each Beam node
(`with_beam_pipeline_args`); the pipeline-level args stay empty. `direct` gets no flag at all:
TFX builds (and never deletes) a 42 MB sdist of itself for every Beam node whose flags are
non-empty and name no dependency; every other profile names this project's setup.py, which
is also what remote workers need (our components, not only TFX's).

`auto` is what the data asks for: Beam's in-memory DirectRunner costs nothing to start but
runs on one core and holds a stage's data in memory; the multi-processing DirectRunner
starts one worker per core (each imports TensorFlow, ~15 s) and streams. The input of a
node is the span's files (ExampleGen, StatisticsGen) or the window's (Transform,
Evaluator), measured on disk when the pipeline is built for a run.

TensorFlow-free: configs validate where TFX is absent.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Literal

from core import machine, nodes
from core.settings import Settings, SettingsError

PROFILES = ("direct", "direct-multiprocess", "portable", "flink", "spark", "dataflow")
CHOICES = ("auto", *PROFILES)
# The options each profile needs (required) and takes (known), as Beam's flags name them.
PROFILE_OPTIONS = {
    "direct": ((), ()),
    "direct-multiprocess": ((), ()),
    # Beam's portable job service (e.g. apache_beam.runners.portability.local_job_service_main)
    # and, for EXTERNAL, an SDK worker pool (apache_beam.runners.worker.worker_pool_main).
    "portable": (("job_endpoint",), ("environment_type", "environment_config", "artifact_endpoint",
                                     "job_server_timeout", "sdk_worker_parallelism")),
    # Flink's job server comes from Maven unless flink_job_server_jar names a local jar.
    "flink": (("flink_master",), ("flink_version", "flink_job_server_jar", "parallelism", "environment_type",
                                  "environment_config", "flink_submit_uber_jar", "sdk_worker_parallelism")),
    "spark": (("spark_master_url",), ("spark_version", "spark_job_server_jar", "environment_type",
                                      "environment_config", "spark_submit_uber_jar", "sdk_worker_parallelism")),
    "dataflow": (("project", "region", "temp_location"), (
        "staging_location", "service_account_email", "machine_type", "max_num_workers", "num_workers",
        "network", "subnetwork", "use_public_ips", "sdk_container_image", "experiments", "dataflow_service_options",
        "labels", "worker_disk_type", "disk_size_gb")),
}
_RUNNERS = {"portable": "PortableRunner", "flink": "FlinkRunner", "spark": "SparkRunner", "dataflow": "DataflowRunner"}
_ENVIRONMENTS = ("DOCKER", "PROCESS", "EXTERNAL", "LOOPBACK")
DEFAULT_MULTIPROCESS_FROM_MB = 256
# A Choice's reason starts with this when the node runs no Beam pipeline after all.
UNUSED = "unused"
# The nodes that run Beam pipelines (what `beam.nodes` may name).
BEAM_NODES = (nodes.CSV_EXAMPLE_GEN, nodes.IMPORT_EXAMPLE_GEN, nodes.PARQUET_EXAMPLE_GEN, nodes.STATISTICS_GEN, nodes.TRANSFORM, nodes.EVALUATOR)


class BeamConfigError(SettingsError):
    """A `beam:` value that cannot work; names the key."""


@dataclasses.dataclass(frozen=True)
class NodeBeam:
    """One node's Beam settings after per-node overrides."""

    profile: str
    workers: int
    options: Mapping[str, Any]
    extra_args: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Choice:
    """What a node runs on, and why (shown in the run's summary and report)."""

    node: str
    profile: str
    args: tuple[str, ...]
    reason: str


@dataclasses.dataclass(frozen=True)
class NodeOverride(Settings):
    """One Beam node's own settings (`beam.nodes.<node>:`); a key left out is the block's.
    A node with another profile than the block's takes none of the block's options or
    extra_args."""

    # Each as in the block (beam.profile, beam.workers, ...); unset: the block's.
    profile: Literal[CHOICES] | None = None  # type: ignore[valid-type]
    workers: int | None = None
    options: Mapping[str, Any] | None = None
    extra_args: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class BeamSettings(Settings):
    """How the Beam nodes run (pipelines/beam.py): a runner profile, chosen per node and by
    the size of its input."""

    # auto, direct, direct-multiprocess, portable, flink, spark or dataflow (PROFILES); auto:
    # direct below multiprocess_from_mb of input to a node, direct-multiprocess from it.
    profile: Literal[CHOICES] = "auto"  # type: ignore[valid-type]
    # direct-multiprocess / portable parallelism; 0 = one per core.
    workers: int = 0

    # auto's threshold: a node's input size (its span's or window's files on disk), in MB.
    multiprocess_from_mb: int = DEFAULT_MULTIPROCESS_FROM_MB
    # The profile's own options, as Beam names them (PROFILE_OPTIONS in pipelines/beam.py).
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # More Beam flags (--flag[=value]), passed as they are.
    extra_args: tuple[str, ...] = ()
    # Per Beam node (ExampleGen, StatisticsGen, Transform, Evaluator), the same keys.
    nodes: Mapping[str, NodeOverride] = dataclasses.field(default_factory=dict)

    @classmethod
    def load(cls, values: Mapping[str, Any] | None, known_nodes: tuple[str, ...] = ()) -> BeamSettings:
        """The `beam:` block, checked by the settings loader (core/settings.py) and the
        profiles' own rules, with `nodes` limited to `known_nodes` where given.

        Raises:
          BeamConfigError: naming the key (`beam.nodes.Evaluator.profile: ...`).
        """
        try:
            settings = cls.from_dict(values, "beam")
        except SettingsError as e:
            raise BeamConfigError(str(e)) from None
        unknown = sorted(set(settings.nodes) - set(known_nodes)) if known_nodes else []
        if unknown:
            raise BeamConfigError(f"beam.nodes: {', '.join(unknown)} run no Beam (Beam nodes: {', '.join(known_nodes)})")
        return settings

    def check(self) -> None:
        if self.multiprocess_from_mb < 0:
            raise SettingsError(f"multiprocess_from_mb: expected an integer >= 0, got {self.multiprocess_from_mb!r}")
        _check_profile("", self.for_node(None))
        for node in self.nodes:
            _check_profile(f"nodes.{node}.", self.for_node(node))

    def for_node(self, node: str | None) -> NodeBeam:
        override = self.nodes.get(node) or NodeOverride() if node is not None else NodeOverride()
        profile = self.profile if override.profile is None else override.profile
        same = profile == self.profile
        return NodeBeam(
            profile=profile,
            workers=self.workers if override.workers is None else override.workers,
            options=dict(override.options or (self.options if same else {})),
            extra_args=tuple(override.extra_args or (self.extra_args if same else ())),
        )

    def choose(self, node: str, input_bytes: int, setup_file: str, cpus: int | None = None) -> Choice:
        """The profile and Beam flags of one node, given how much data it reads."""
        node_beam = self.for_node(node)
        profile, reason = node_beam.profile, "configured"
        if profile == "auto":
            limit = self.multiprocess_from_mb << 20
            if input_bytes >= limit:
                profile = "direct-multiprocess"
                reason = f"auto: {_mb(input_bytes)} of input >= {self.multiprocess_from_mb} MB"
            else:
                profile = "direct"
                reason = f"auto: {_mb(input_bytes)} of input < {self.multiprocess_from_mb} MB"
        workers = node_beam.workers or cpus or machine.usable_cpus()
        return Choice(node, profile, tuple(args_for(profile, workers, node_beam.options, node_beam.extra_args,
                                                    setup_file)), reason)


def _check_profile(where: str, node: NodeBeam) -> None:
    """A profile's rules; `where` is the key path below `beam.` ('' or 'nodes.<node>.')."""
    profile, workers, options, extra_args = node.profile, node.workers, node.options, node.extra_args
    if workers < 0:
        raise SettingsError(f"{where}workers: expected an integer >= 0, got {workers!r}")
    if not all(isinstance(a, str) and a.startswith("--") for a in extra_args):
        raise SettingsError(f"{where}extra_args: expected a list of --flag[=value] strings, got {list(extra_args)}")
    if profile == "auto":
        if options:
            raise SettingsError(f"{where}options: profile auto picks direct or direct-multiprocess, which "
                              f"take no options; name the profile the options are for")
        return
    required, known = PROFILE_OPTIONS[profile]
    missing = [k for k in required if options.get(k) in (None, "")]
    if missing:
        raise SettingsError(f"{where}options: profile {profile} needs {', '.join(missing)}")
    unknown = sorted(set(options) - set(required) - set(known))
    if unknown:
        raise SettingsError(f"{where}options: {', '.join(unknown)} not known for profile {profile} "
                            f"(known: {', '.join(sorted(required + known)) or 'none'}; other flags go in extra_args)")
    environment = options.get("environment_type")
    if environment is not None and environment not in _ENVIRONMENTS:
        raise SettingsError(f"{where}options.environment_type: {environment!r} is not one of {list(_ENVIRONMENTS)}")
    if profile == "portable" and options.get("environment_type", "EXTERNAL") == "EXTERNAL" \
            and not options.get("environment_config"):
        raise SettingsError(f"{where}options.environment_config: an EXTERNAL environment needs the worker "
                            "pool's host:port (scripts/beam_portable.sh start prints it)")
    for key in ("job_endpoint", "environment_config", "flink_master", "artifact_endpoint"):
        value = options.get(key)
        if key == "environment_config" and options.get("environment_type", "EXTERNAL") != "EXTERNAL":
            continue
        if value is not None and not (isinstance(value, str) and (_host_port(value) or value.startswith("["))):
            raise SettingsError(f"{where}options.{key}: expected host:port, got {value!r}")
    if profile == "spark":
        url = options["spark_master_url"]
        if not (isinstance(url, str) and (url.startswith(("spark://", "local")) or url == "yarn")):
            raise SettingsError(f"{where}options.spark_master_url: expected spark://host:port, local[N] or yarn, "
                                f"got {url!r}")
    if profile == "dataflow":
        for key in ("temp_location", "staging_location"):
            value = options.get(key)
            if value is not None and not str(value).startswith("gs://"):
                raise SettingsError(f"{where}options.{key}: Dataflow needs a gs:// path, got {value!r}")
    for key in ("flink_job_server_jar", "spark_job_server_jar"):
        jar = options.get(key)
        if jar is not None and "://" not in str(jar) and not os.path.isfile(str(jar)):
            raise SettingsError(f"{where}options.{key}: {jar} is not a file (these machines cannot fetch it "
                                "from Maven)")


def args_for(profile: str, workers: int, options: Mapping[str, Any], extra_args: tuple[str, ...],
             setup_file: str) -> list[str]:
    """The Beam flags of a profile."""
    if profile == "direct":
        return list(extra_args)
    args = [f"--setup_file={setup_file}"]
    if profile == "direct-multiprocess":
        args += ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
    else:
        args.append(f"--runner={_RUNNERS[profile]}")
        defaults = {"portable": {"environment_type": "EXTERNAL", "sdk_worker_parallelism": workers},
                    "flink": {"parallelism": workers}}.get(profile, {})
        for key, value in {**defaults, **options}.items():
            for item in value if isinstance(value, list) else [value]:
                if item is True:
                    args.append(f"--{key}")
                elif item is not False and item is not None:
                    args.append(f"--{key}={item}")
    return args + list(extra_args)


def _host_port(value: str) -> bool:
    host, _, port = value.rpartition(":")
    return bool(host) and port.isdigit()


def _mb(n: int) -> str:
    return f"{n / (1 << 20):.1f} MB"
