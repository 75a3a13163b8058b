"""Search spaces: the file format (settings, parameters), validation and loading."""

from autotune.space.files import (
    BUILTIN_SPACES_DIR,
    builtin_spaces,
    find_space_file,
    load_space,
    with_enqueued,
)
from autotune.space.model import REPO_ROOT, SearchSpace
from autotune.space.settings import (
    AccuracyConstraint,
    Constraints,
    LaunchSettings,
    Objective,
    ParamSpec,
    SamplerSettings,
    Screening,
    Workload,
    parse_duration,
)

__all__ = [
    "BUILTIN_SPACES_DIR",
    "REPO_ROOT",
    "AccuracyConstraint",
    "Constraints",
    "LaunchSettings",
    "Objective",
    "ParamSpec",
    "SamplerSettings",
    "Screening",
    "SearchSpace",
    "Workload",
    "builtin_spaces",
    "find_space_file",
    "load_space",
    "parse_duration",
    "with_enqueued",
]
