"""The names a config class author uses, in one place: the base class, the registry's decorator, the rung of an
engine ladder and the shared-values decorator (the mechanism lives in ``code/config/``).

Config files, and the ``custom.py`` files ``make add_system`` wrote, import these names from here; code under
``code/`` imports them from ``code/config/`` itself.
"""

from code.config.classes import BenchmarkConfiguration, shared_values, validate_config_class
from code.config.ladder import Rung
from code.config.registry import ConfigRegistry, gpu_model_classes
from code.config.resolve import resolve_config, system_values
from code.config.resolved import ConfigError, ResolvedConfig, WorkloadSetting

__all__ = ["BenchmarkConfiguration", "ConfigError", "ConfigRegistry", "ResolvedConfig", "Rung", "WorkloadSetting",
           "gpu_model_classes", "resolve_config", "shared_values", "system_values", "validate_config_class"]
