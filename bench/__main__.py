"""``python -m bench``: Pacer's controller against the best fixed cap, the reference and a
latency limiter, in virtual time (see the README's "Benchmarks").

    python -m bench run --workload bench/workloads/w1_single_short.toml --policy pacer
    python -m bench sweep --workload bench/workloads/w3_agentic.toml
    python -m bench report
    python -m bench sensitivity --workload bench/workloads/w1_single_short.toml
    python -m bench share --policy reference
    python -m bench fit --run 12 --out fit-12.toml
"""

from bench.virtual.cli import main

if __name__ == "__main__":
    main()
