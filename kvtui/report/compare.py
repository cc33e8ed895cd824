"""The modes side by side: the arithmetic lives in kvtui.explore.compare (the run writes the
comparison into its snapshot, and explore sits below report); this name stays for readers."""

from kvtui.explore.compare import (  # noqa: F401 - re-exported
    PEAK_MARGIN,
    compare_modes,
    knee_steps,
    mode_summary,
    peak_steps,
)
