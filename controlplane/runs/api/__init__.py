"""The REST API under /api/: thin views over the selectors (reads) and services (writes)."""
