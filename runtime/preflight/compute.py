"""Compute test with a known answer: an integer-valued matrix product on every device.

Entries in {-2…2} and products summed over at most 16384 terms stay below 2^24, so float32 (and
TF32 on GPUs, whose inputs keep such small integers exactly) must give the exact integers.
"""

from __future__ import annotations

import time

import torch

from runtime.preflight.config import PreflightConfig
from runtime.preflight.result import Finding

REPEATS = 3


def _devices(gpus: int) -> list[torch.device]:
    if gpus and torch.cuda.is_available():
        return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return [torch.device("cpu")]


def _operands(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1234)
    left = torch.randint(-2, 3, (size, size), generator=generator, dtype=torch.int64)
    return left, left.T.contiguous()


def _run(device: torch.device, left: torch.Tensor, right: torch.Tensor) -> tuple[bool, float]:
    """(exact, GFLOP/s) of the product on one device."""
    expected = left @ right  # int64 on the CPU: the known answer
    a, b = left.to(device, torch.float32), right.to(device, torch.float32)
    product = a @ b
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(REPEATS):
        product = a @ b
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = max(time.perf_counter() - start, 1e-9)
    exact = bool(torch.equal(product.cpu().to(torch.int64), expected))
    return exact, 2 * left.shape[0] ** 3 * REPEATS / seconds / 1e9


def check(config: PreflightConfig, figures: dict[str, float]) -> list[Finding]:
    findings = []
    if config.gpus and torch.cuda.device_count() < config.gpus:
        findings.append(Finding(check="compute", severity="error",
                                message=f"{torch.cuda.device_count()} GPUs visible, "
                                        f"{config.gpus} expected"))
    left, right = _operands(config.compute_size)
    for device in _devices(config.gpus):
        exact, gflops = _run(device, left, right)
        figures[f"compute.{device}.gflops"] = round(gflops, 2)
        findings.append(Finding(
            check="compute", severity="ok" if exact else "error",
            message=f"{device}: {config.compute_size}² matmul "
                    f"{'exact' if exact else 'WRONG RESULT'}, {gflops:.1f} GFLOP/s"))
    return findings
