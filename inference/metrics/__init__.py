"""Reads vLLM engines' ``/metrics`` and ``/v1/models`` into load samples and engine health."""
