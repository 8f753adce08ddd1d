"""The orchestrator: groups of rollouts from the environments, scored and assembled into
training batches, one step at a time, with evaluation waves in the same pool."""
