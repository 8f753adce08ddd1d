"""The dispatcher: permits, admission pacing, group routing, shedding and off-policy drops,
with the episodes' asyncio tasks."""
