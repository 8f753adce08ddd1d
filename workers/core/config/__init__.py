"""A run's config: one schema for TOML and JSON, read with every field error at once."""
