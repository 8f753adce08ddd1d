"""The concurrency controller: a pure state machine that sizes the in-flight cap from engine
polls, episode completions and operator commands, around one pluggable policy."""
