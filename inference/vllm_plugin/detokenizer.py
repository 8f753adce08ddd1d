"""Keep out-of-vocabulary token ids from crashing vLLM's logprob detokenization.

Models whose output layer is padded past the tokenizer (the Qwen family among them) can sample
ids the tokenizer has no piece for, and do so more often once RL training moves the untrained
tail logits. With logprobs requested, vLLM renders each sampled id through
`convert_ids_list_to_tokens`; for leading-space-marker (Metaspace) tokenizers that hands the raw
piece to `_restore_leading_spaces`, which iterates it. The raw piece of an unknown id is `None`,
the `TypeError` kills the output-handling loop, and with it the API server and every in-flight
request.

The fix treats a missing piece as "no leading space to restore": the decoded string (usually
empty for such ids) is returned unchanged. `convert_ids_list_to_tokens` looks the helper up as a
module global on every call, so replacing it in its module reaches every caller, including those
that imported `convert_ids_list_to_tokens` by name.
"""

import enum
import functools
import importlib
from collections.abc import Callable
from types import ModuleType

from inference.vllm_plugin.logs import get_logger

logger = get_logger()

# Where vLLM has kept the helper, newest first (it moved from transformers_utils to tokenizers).
MODULE_NAMES = (
    "vllm.tokenizers.detokenizer_utils",
    "vllm.transformers_utils.detokenizer_utils",
)
TARGET = "_restore_leading_spaces"
# Set on the replacement so that a second registration in the same process is a no-op.
PATCHED_MARKER = "__pacer_patched__"

RestoreFn = Callable[[str, str, str], str]


class Outcome(enum.Enum):
    PATCHED = "patched"
    ALREADY_PATCHED = "already patched"
    TARGET_MISSING = "target missing"


def tolerate_missing_piece(original: RestoreFn) -> Callable[[str | None, str, str], str]:
    """Wrap vLLM's helper so an id without a vocabulary piece keeps its decoded string."""

    @functools.wraps(original)
    def restore_leading_spaces(raw_token: str | None, token_str: str, marker: str) -> str:
        if raw_token is None:
            return token_str
        return original(raw_token, token_str, marker)

    setattr(restore_leading_spaces, PATCHED_MARKER, True)
    return restore_leading_spaces


def patch_module(module: ModuleType) -> Outcome:
    """Replace the helper in `module`, once."""
    original = getattr(module, TARGET, None)
    if not callable(original):
        return Outcome.TARGET_MISSING
    if getattr(original, PATCHED_MARKER, False):
        return Outcome.ALREADY_PATCHED
    setattr(module, TARGET, tolerate_missing_piece(original))
    return Outcome.PATCHED


def find_module(names: tuple[str, ...]) -> ModuleType | None:
    """Import the first of `names` that exists in the installed vLLM."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as err:
            # Only "this location does not exist" moves on; a broken dependency is a real error.
            if err.name is None or not (name + ".").startswith(err.name + "."):
                raise
    return None


def apply(module_names: tuple[str, ...] = MODULE_NAMES) -> Outcome:
    """Patch the installed vLLM, and say so: a patch that silently does nothing is a crash later."""
    module = find_module(module_names)
    if module is None:
        warn_not_applied(f"none of {', '.join(module_names)} exists")
        return Outcome.TARGET_MISSING
    outcome = patch_module(module)
    if outcome is Outcome.TARGET_MISSING:
        warn_not_applied(f"{module.__name__} has no callable {TARGET}")
    elif outcome is Outcome.PATCHED:
        logger.info(
            "detokenizer patch active: %s.%s tolerates out-of-vocabulary ids",
            module.__name__,
            TARGET,
        )
    return outcome


def warn_not_applied(why: str) -> None:
    logger.warning(
        "detokenizer patch NOT applied: %s (did vLLM change?). Requests with logprobs that "
        "sample an out-of-vocabulary id can crash this engine; update %s.",
        why,
        __name__,
    )
