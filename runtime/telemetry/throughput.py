"""A rank's throughput figures: model FLOPs utilisation and peak memory, per training step.

MFU is the model's training FLOPs per second over the device's peak (PaLM, Chowdhery et al.
2022, appendix B: tokens/s x 6N-plus-attention FLOPs per token, without rematerialisation,
over the hardware's peak). The peak is the catalog's dense bf16 figure of the accelerator,
rendered into GPU pods as GKR_PEAK_TFLOPS; `telemetry.peak_tflops` overrides it (a local or
CPU run, where nothing renders it); neither: MFU is unknown (NULL), never guessed.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Mapping

import torch

from runtime.errors import ConfigError
from runtime.identity import Env

TERA = 1e12
# getrusage(2): Linux reports ru_maxrss in kilobytes, macOS (darwin) in bytes.
RSS_UNIT = 1 if sys.platform == "darwin" else 1024


def peak_flops(override_tflops: float | None, environ: Mapping[str, str]) -> float | None:
    """Peak FLOP/s of one device: the config's override, else GKR_PEAK_TFLOPS, else None."""
    if override_tflops is not None:
        return override_tflops * TERA
    text = environ.get(Env.PEAK_TFLOPS, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ConfigError(Env.PEAK_TFLOPS, f"{text!r} is not a positive number of TFLOP/s "
                          "(gkr render sets it from platform/catalog/accelerators.yaml "
                          "peak_tflops)", source="environment")
    return value * TERA


def mfu(tokens_per_s: float, flops_per_token: float | None,
        peak_flops_per_s: float | None) -> float | None:
    """Model FLOPs utilisation, a fraction of the peak; None when either figure is unknown."""
    if flops_per_token is None or peak_flops_per_s is None:
        return None
    return tokens_per_s * flops_per_token / peak_flops_per_s


def memory_peaks() -> dict[str, int | None]:
    """This process's peak memory: the CUDA caching allocator's peaks since the last call
    (allocated by tensors, reserved from the driver) where this process uses CUDA, and the
    process's peak resident set since it started (getrusage's peak is never reset)."""
    peaks: dict[str, int | None] = {
        "cuda_peak_allocated_bytes": None, "cuda_peak_reserved_bytes": None,
        "rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * RSS_UNIT}
    if torch.cuda.is_initialized():  # not on a CPU run, and never started here
        peaks["cuda_peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        peaks["cuda_peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        torch.cuda.reset_peak_memory_stats()  # the next row gets its own step's peak
    return peaks


def summary_line(tokens_per_s: float | None, mfu_mean: float | None, cuda_peak: int | None,
                 rss_peak: int | None) -> str:
    """A run's throughput in words (`run_throughput.sql`'s row); '' for a run of no steps."""
    if tokens_per_s is None:
        return ""
    parts = [f"{tokens_per_s:,.0f} tokens/s per rank"]
    if mfu_mean is not None:
        parts.append(f"MFU {mfu_mean:.1%}")
    if cuda_peak is not None:
        parts.append(f"peak CUDA memory {cuda_peak / 2**30:.1f} GiB")
    elif rss_peak is not None:
        parts.append(f"peak RSS {rss_peak / 2**30:.1f} GiB")
    return ", ".join(parts)
