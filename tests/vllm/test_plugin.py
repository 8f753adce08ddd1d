"""The plugin against the installed vLLM, in the vLLM virtualenv, without an engine.

Each case runs a short script in a fresh interpreter of that venv: patches are per process, so a
fresh process is the only honest "before".
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.vllm.conftest import PATCH_ACTIVE

pytestmark = pytest.mark.vllm

NOT_APPLIED = "detokenizer patch NOT applied"


def run(vllm_python: Path, script: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(vllm_python), "-c", script],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return result


def test_patch_keeps_known_pieces_and_tolerates_unknown_ids(
    vllm_python: Path, tiny_model: Path, first_unknown_id: int
) -> None:
    script = f"""
import json
from vllm.tokenizers import get_tokenizer
from vllm.tokenizers import detokenizer_utils
from inference.vllm_plugin import register

tokenizer = get_tokenizer({str(tiny_model)!r})
known = list(range(3, {first_unknown_id}))
before = detokenizer_utils.convert_ids_list_to_tokens(tokenizer, known)
try:
    detokenizer_utils.convert_ids_list_to_tokens(tokenizer, [{first_unknown_id}])
    crash = None
except TypeError as err:
    crash = str(err)
register()
register()
after = detokenizer_utils.convert_ids_list_to_tokens(tokenizer, known)
unknown = detokenizer_utils.convert_ids_list_to_tokens(tokenizer, [5, {first_unknown_id}, 7])
print(json.dumps({{"crash": crash, "same": before == after, "unknown": unknown,
                  "expected": detokenizer_utils.convert_ids_list_to_tokens(tokenizer, [5, 7])}}))
"""
    result = run(vllm_python, script)
    out = json.loads(result.stdout.splitlines()[-1])
    assert out["crash"] == "'NoneType' object is not iterable"
    assert out["same"]
    assert out["unknown"] == [out["expected"][0], "", out["expected"][1]]
    assert result.stderr.count(PATCH_ACTIVE) == 1


def test_missing_target_is_reported(vllm_python: Path) -> None:
    script = """
import types
from inference.vllm_plugin import detokenizer

print(detokenizer.apply(("vllm.no_such_module",)).name)
print(detokenizer.patch_module(types.ModuleType("detokenizer_utils")).name)
"""
    result = run(vllm_python, script)
    assert result.stdout.split() == ["TARGET_MISSING", "TARGET_MISSING"]
    assert NOT_APPLIED in result.stderr
    assert "vllm.no_such_module" in result.stderr
    assert PATCH_ACTIVE not in result.stderr


def test_falls_back_to_the_location_that_exists(vllm_python: Path) -> None:
    script = """
from inference.vllm_plugin import detokenizer

# vLLM 0.32 has only the newer location: the older one, tried first, must be skipped.
print(detokenizer.apply(tuple(reversed(detokenizer.MODULE_NAMES))).name)
"""
    result = run(vllm_python, script)
    assert result.stdout.split() == ["PATCHED"]
    assert PATCH_ACTIVE in result.stderr


def test_plugin_is_registered_for_vllm(vllm_python: Path) -> None:
    script = """
from importlib.metadata import entry_points

print([ep.value for ep in entry_points(group="vllm.general_plugins", name="pacer")])
"""
    assert run(vllm_python, script).stdout.strip() == "['inference.vllm_plugin:register']"
