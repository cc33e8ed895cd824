"""kvtui run --cluster: the lanes of a comparison spread over a Ray cluster (issue 48).

- `lane.py`: what runs on a node: the node's probe, and a lane (the same `kvtui run --headless
  --mode NAME` subprocess as `--parallel`'s lanes, on the GPUs Ray gave it), its output and its
  journal's steps streamed back while it runs.
- `hub.py`: the driver's actor that the lanes stream to, and that tells them to stop.
- `view.py`: the lanes' state as the driver sees it (queued, running, done, lost…), for the
  headless lines and the TUI's table alike.
- `driver.py`: connect, probe the nodes, submit the lanes, follow them, bring their files back.

Ray is an optional extra (`pip install 'kvtui[ray]'`): nothing here imports it at module level.
"""
