"""Environments: each runs one episode against an engine and scores it. Built in:
``arithmetic``, ``multiturn``, ``longtail``; more plug in through the entry-point group
``pacer.environments``."""
