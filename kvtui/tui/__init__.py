"""The Textual dashboard: `create_app` (kvtui.tui.app) for the CLI, the web demo, the SVG export and the tests.

    state.py    RunState: what the run reported, bounded and versioned (no widgets)
    app.py      the app, its controls, the run in a thread worker, export, SLO re-evaluation
    screens.py  dashboard (live and replay), setup, SLO editor, mode comparison
    charts.py   plotext charts through the Line API, sparklines
    widgets.py  header, status line, memory bar, step table, log pane, step slider
    themes.py   themes/*.toml as Textual themes plus chart colours
    svg.py      render_dashboard_svg(doc, width, height, theme)
"""
