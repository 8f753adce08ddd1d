"""Serve a simulated vLLM engine over HTTP: python -m inference.sim [options].

Example: python -m inference.sim --port 8100 --kv-tokens 65536 --block-size 16 \\
             --max-num-seqs 256 --preset h100-8b --seed 0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys

from inference.sim.config import EngineConfig
from inference.sim.dev_routes import DEV_MODE_ENV, dev_mode_from_env
from inference.sim.engine import Engine
from inference.sim.http11 import start_server
from inference.sim.presets import PRESETS, get_preset
from inference.sim.sampling import LengthDistribution
from inference.sim.server import EngineLoop, SimServer

DEFAULT_PRESET = "h100-8b"


def build_parser() -> argparse.ArgumentParser:
    presets = "\n".join(
        f"  {p.name:10} {p.summary}\n"
        f"  {'':10} defaults: {p.kv_tokens} KV tokens, block {p.block_size}, "
        f"max_num_seqs {p.max_num_seqs}, {p.max_num_batched_tokens} tokens/step, "
        f"max_model_len {p.max_model_len}"
        for p in PRESETS.values()
    )
    parser = argparse.ArgumentParser(
        prog="python -m inference.sim",
        description="A vLLM-compatible engine simulator: KV blocks, continuous batching, "
        "preemption and prefix caching, with vLLM's OpenAI API and /metrics.",
        epilog=f"presets (step-cost model and engine defaults; flags override the defaults):\n"
        f"{presets}\n\nSee inference/sim/presets.py for where each preset's numbers come from.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (%(default)s)")
    parser.add_argument("--port", type=int, default=8100, help="port, 0 for any (%(default)s)")
    parser.add_argument(
        "--preset",
        default=DEFAULT_PRESET,
        choices=sorted(PRESETS),
        help="engine profile (%(default)s)",
    )
    parser.add_argument("--kv-tokens", type=int, help="KV cache size in tokens")
    parser.add_argument(
        "--num-gpu-blocks-override",
        type=int,
        help="KV cache size in blocks, null block included (as vLLM's flag)",
    )
    parser.add_argument("--block-size", type=int, help="tokens per KV block")
    parser.add_argument("--max-num-seqs", type=int, help="running-batch cap")
    parser.add_argument("--max-num-batched-tokens", type=int, help="token budget per step")
    parser.add_argument("--max-model-len", type=int, help="longest prompt plus completion")
    parser.add_argument("--served-model-name", default="sim-model", help="model name (%(default)s)")
    parser.add_argument("--no-prefix-caching", action="store_true", help="disable prefix caching")
    parser.add_argument(
        "--length",
        type=LengthDistribution.parse,
        default=None,
        help="end-of-sequence lengths, kind:mean[:spread] with kind fixed, "
        "uniform or lognormal (default: none, outputs run to max_tokens)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of lengths and text (%(default)s)"
    )
    parser.add_argument(
        "--reload-s",
        type=float,
        help="seconds a weight reload holds the engine (default: the preset's estimate); "
        f"the reload and pause routes are served with {DEV_MODE_ENV}=1, as by vLLM",
    )
    return parser


def build_engine(args: argparse.Namespace) -> Engine:
    """The engine the options describe; raises ValueError on inconsistent options."""
    preset = get_preset(args.preset)
    block_size = args.block_size or preset.block_size
    fields = {
        "model_name": args.served_model_name,
        "max_num_seqs": args.max_num_seqs or preset.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens or preset.max_num_batched_tokens,
        "max_model_len": args.max_model_len or preset.max_model_len,
        "enable_prefix_caching": not args.no_prefix_caching,
        "seed": args.seed,
    }
    if args.num_gpu_blocks_override is not None:
        if args.kv_tokens is not None:
            raise ValueError("give --kv-tokens or --num-gpu-blocks-override, not both")
        config = EngineConfig(
            block_size=block_size, num_gpu_blocks=args.num_gpu_blocks_override, **fields
        )
    else:
        config = EngineConfig.from_kv_tokens(
            args.kv_tokens or preset.kv_tokens, block_size, **fields
        )
    reload_s = preset.reload_s if args.reload_s is None else args.reload_s
    return Engine(config, preset.cost, args.length, preset.grammar_compile_s, reload_s)


async def serve(engine: Engine, host: str, port: int, dev_mode: bool = False) -> None:
    """Serves until SIGINT or SIGTERM; re-raises if the engine loop fails."""
    loop = EngineLoop(engine)
    server = SimServer(loop, dev_mode)
    tcp = await start_server(server.handle, host, port)
    bound = tcp.sockets[0].getsockname()[1]
    config = engine.config
    print(
        f"inference.sim serving {config.model_name} on http://{host}:{bound} "
        f"({config.kv_capacity_tokens} KV tokens, block {config.block_size}, "
        f"max_num_seqs {config.max_num_seqs}"
        f"{', dev routes' if dev_mode else ''})",
        flush=True,
    )
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    engine_task = asyncio.create_task(loop.run())
    stop_task = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait((engine_task, stop_task), return_when=asyncio.FIRST_COMPLETED)
    tcp.close()
    stop_task.cancel()
    if engine_task in done:
        engine_task.result()  # the engine loop never returns: this raises its failure
    engine_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await engine_task


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        engine = build_engine(args)
        dev_mode = dev_mode_from_env(os.environ)
    except ValueError as exc:
        parser.error(str(exc))
    asyncio.run(serve(engine, args.host, args.port, dev_mode))
    return 0


if __name__ == "__main__":
    sys.exit(main())
