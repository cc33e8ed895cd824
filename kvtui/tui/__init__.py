"""The Textual dashboard: `create_app` / `make_app` (kvtui.tui.app) for the CLI, the web demo, the SVG export \
and the tests.

    options.py      AppOptions: the one options object the app is built from (plain data, no Textual)
    app.py          the app, the run in a thread worker, its events; controls.py, shutdown.py, documents.py: its mixins
    state.py        RunState, the view-model (no widgets); modeview.py, ingest.py, series.py: its parts
    keys.py         every key of every screen: the bindings and the `?` help are made from it
    screens.py      the dashboard (live and replay); answer.py, compare_screen.py, setup_screen.py, slo_form.py
    charts.py       plotext charts through the Line API; latency_charts.py, sparks.py, legend.py, redraw.py, ticks.py
    widgets.py      header, status line, log pane, step slider; steptable.py, gpupanel.py
    themes.py       themes/*.toml as Textual themes plus chart colours
    svg.py          render_dashboard_svg(doc, width, height, theme, mode, step, view)

Imports: everything below it (report, explore, the runtime, io, core, the floor) and Textual, which
only it and the command line may import; never kvtui.cli.
"""
