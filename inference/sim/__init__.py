"""A vLLM-compatible engine simulator, in real time (HTTP) and in virtual time (in-process).

The engine model borrows vLLM v1's structure and names: ``block_pool`` (free queue in eviction
order, prefix-hash map, reference counts), ``kv_manager`` (``allocate_slots`` returns None
when blocks run out), ``scheduler`` (running first, then waiting, a token budget per step,
preemption by recompute of the newest request), with ``cost`` (step time), ``sampling`` and
``text`` (what each request generates), ``engine`` (all of it, stepped by a caller's clock)
and ``stats`` / ``metrics`` (vLLM's Prometheus families). ``server`` serves it over vLLM's
OpenAI-compatible HTTP surface in real time (``python -m inference.sim``); ``virtual`` runs it
on a virtual clock, with ``fast_forward`` applying runs of identical decode steps at once and
``arrivals`` holding requests submitted ahead of their arrival until the clock reaches them.
``presets`` names calibrated step-cost models.
"""
