"""Pacer's workers: the Celery app and the run runtime around the pure control core."""
