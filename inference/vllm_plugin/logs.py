"""The plugin's own logger.

vLLM loads plugins while it is still parsing its command line, before it configures logging, so
a record sent through vLLM's logger tree at that point is dropped (INFO) or printed bare
(WARNING). The plugin therefore prints through a handler of its own, tagged with the process id,
since every vLLM process loads the plugin and each one must say whether it is patched.
"""

import logging
import sys

LOGGER_NAME = "pacer.vllm_plugin"
FORMAT = "%(levelname)s %(asctime)s [pacer vllm plugin, pid %(process)d] %(message)s"


def get_logger() -> logging.Logger:
    logger = logging.getLogger(LOGGER_NAME)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger
