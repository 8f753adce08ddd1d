"""The runtime: the control core wired to real engines, files, clocks and reporters.

Thin by design: what decides lives in ``workers/core``; this package only builds the clients
the core is given and carries its results to disk, logs and dashboards.
"""
