"""``pacer``: the command-line client of Pacer's REST API (and of a run's live websocket).

A plain client: it imports neither Django nor anything of the control plane, so it installs
and runs on a laptop with httpx and websockets alone.
"""
