"""Modal's list prices, in one dated table: what a Modal recipe's plan estimates cost from.

Source: Modal's pricing page (per-second rates, converted to USD per hour), as quoted on
2026-05-07 (H100 $0.001097/s = $3.9492/h, A100 80GB $2.4984/h, L40S $1.9512/h, L4
$0.7992/h, T4 $0.5904/h). Sandboxes pay about 3x the Function rate for CPU, and region
pinning and non-preemptible multipliers come on top; none of that is applied here, so the
estimate is the floor: the GPUs at list price plus the CPU and memory the sandbox asks.
Prices change: check the page before a large run, and update PRICES_AS_OF with the table.
"""

from __future__ import annotations

PRICES_AS_OF = "2026-05-07"
PRICES_SOURCE = "Modal pricing page (per-second list prices), as quoted on 2026-05-07"

# USD per GPU-hour, by Modal's GPU name (the `gpu=` string before any ":count")
GPU_USD_PER_HOUR: dict[str, float] = {
    "B200": 6.2496,
    "H200": 4.5396,
    "H100": 3.9492,
    "A100-80GB": 2.4984,
    "A100-40GB": 2.0988,
    "L40S": 1.9512,
    "A10G": 1.1016,
    "L4": 0.7992,
    "T4": 0.5904,
}
CPU_USD_PER_CORE_HOUR = 0.04716  # $0.0000131 per physical core per second
MEMORY_USD_PER_GIB_HOUR = 0.007992  # $0.00000222 per GiB per second


def gpu_price(gpu: str) -> float | None:
    """USD per hour of one GPU of this type; None for a type not in the table."""
    key = gpu.strip().upper().replace("_", "-")
    aliases = {"A100": "A100-40GB", "H100!": "H100"}
    key = aliases.get(key, key)
    return GPU_USD_PER_HOUR.get(key)


def cost_per_hour(
    gpu: str, count: int, *, cpu: float = 0.0, memory_gib: float = 0.0
) -> float | None:
    """The floor of an hour's cost: GPUs, CPU cores and memory at list price (None when the
    GPU type has no price: an unknown price must not read as free)."""
    price = gpu_price(gpu)
    if price is None:
        return None
    total = price * count + cpu * CPU_USD_PER_CORE_HOUR + memory_gib * MEMORY_USD_PER_GIB_HOUR
    return round(total, 2)
