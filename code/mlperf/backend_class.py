"""What a benchmark asks of a backend class, the same for every benchmark: its options from the resolved config, the
engine a run loads, building that engine, and an instance. A benchmark names its protocol ``BackendClass[<its context>,
<its backend>]``. It sits apart from the declarations (``code.config.backends``), which the configuration reads, as it
names resolved configs and engine reports: there it made the configuration's modules a circle."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from code.config.resolved import ResolvedConfig
    from code.mlperf.benchmarks import EngineReport

ContextT = TypeVar("ContextT", contravariant=True)  # what the benchmark prepared: device, engines folder, data
BackendT = TypeVar("BackendT", covariant=True)  # an instance: the benchmark's own ``run_batch`` protocol


class BackendClass(Protocol[ContextT, BackendT]):
    """What a benchmark asks of a backend before one exists: its options, its engine, then an instance."""

    def options_from(self, config: ResolvedConfig, context: ContextT) -> Any:
        """The backend's own frozen options, read from the resolved config and the context."""

    def engine_dir(self, config: ResolvedConfig, context: ContextT) -> Path | None:
        """The engine folder a run of this config loads; None for a backend without an engine."""

    def generate_engine(self, config: ResolvedConfig, context: ContextT) -> EngineReport:
        """Build the engine a run of this config loads (or say why there is none)."""

    def __call__(self, options: Any) -> BackendT: ...
