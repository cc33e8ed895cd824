"""The modes side by side: the arithmetic lives in kvtui.explore.compare (the run writes the
comparison into its snapshot, and explore sits below report); this name stays for readers."""

from kvtui.explore.compare import (  # noqa: F401 - re-exported
    PEAK_MARGIN,
    add_ratios,
    compare_modes,
    cost_settings,
    knee_steps,
    measured_steps,
    mode_summary,
    next_steps,
    peak_per_gpu,
    peak_steps,
    usd_per_mtok,
)
