"""The control core: plain Python and asyncio, with every client and the clock injected.

``samples``, ``decisions``, ``clock`` and ``validation`` are the contracts everything below
shares; ``controller/`` decides the cap, ``dispatch/`` runs episodes under it, and
``control_loop`` wires polls and completions to both. Nothing here imports Django, Celery or
an HTTP library, so the same code runs in a Celery task, a unit test and virtual time.
"""
