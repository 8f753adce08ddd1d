"""Pacer's vLLM plugin: the patches every vLLM process must carry.

vLLM calls the entry points of the `vllm.general_plugins` group in each of its processes (API
server, engine core, workers), so a fix registered here reaches the code that needs it whatever
process layout the engine runs with. `VLLM_PLUGINS` can exclude it (`VLLM_PLUGINS=""`), which is
how the tests run the unpatched control case.
"""

from inference.vllm_plugin import detokenizer


def register() -> None:
    """Entry point named in pyproject.toml; vLLM may call it more than once per process."""
    detokenizer.apply()
