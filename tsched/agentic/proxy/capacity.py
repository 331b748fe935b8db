"""A replica's KV-cache capacity, read from its Prometheus metrics (vLLM's cache config, Dynamo's
frontend gauges), or given on the command line."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tsched.agentic.proxy.settings import split_backend
from tsched.errors import InputError

__all__ = ["capacity_from_metrics", "discover_capacity", "parse_capacities"]


_CACHE_INFO = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.M)


_LABEL = re.compile(r'(\w+)="([^"]*)"')


_DYN_BLOCKS = re.compile(r"^dynamo_frontend_model_total_kv_blocks\{[^}]*\}\s+([0-9.e+]+)", re.M)


_DYN_BLOCK = re.compile(r"^dynamo_frontend_model_kv_cache_block_size\{[^}]*\}\s+([0-9.e+]+)", re.M)


def capacity_from_metrics(text: str) -> int | None:
    """KV capacity in tokens from a backend's Prometheus text: vLLM's ``cache_config_info``
    (``num_gpu_blocks × block_size``) or a Dynamo frontend's model gauges; None if neither."""
    match = _CACHE_INFO.search(text)
    if match:
        labels = dict(_LABEL.findall(match.group(1)))
        try:
            blocks = int(float(labels["num_gpu_blocks"]))
            size = int(float(labels["block_size"]))
        except (KeyError, ValueError):
            blocks = size = 0
        if blocks > 0 and size > 0:
            return blocks * size
    blocks_m, size_m = _DYN_BLOCKS.search(text), _DYN_BLOCK.search(text)
    if blocks_m and size_m:
        total = int(float(blocks_m.group(1))) * int(float(size_m.group(1)))
        return total if total > 0 else None
    return None


def discover_capacity(url: str, timeout: float = 10.0) -> int:
    """Read a backend's KV capacity (tokens) from its ``/metrics``; :class:`InputError` saying
    to pass ``--capacity-tokens`` when the endpoint has no such figure."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/metrics", timeout=timeout) as resp:
            text = resp.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        raise InputError(
            f"--backend {url}: cannot read /metrics for its KV capacity ({exc}); "
            "pass --capacity-tokens"
        ) from None
    capacity = capacity_from_metrics(text)
    if capacity is None:
        raise InputError(
            f"--backend {url}: /metrics has no KV capacity (vllm:cache_config_info or "
            "dynamo_frontend_model_total_kv_blocks); pass --capacity-tokens"
        )
    return capacity


def parse_capacities(values: Sequence[int] | None, backends: Sequence[str]) -> tuple[int, ...]:
    """One capacity for all backends, one per backend, or (None) read from each backend."""
    if not values:
        return tuple(discover_capacity(split_backend(b)[0]) for b in backends)
    if len(values) == 1:
        return tuple(values) * len(backends)
    if len(values) != len(backends):
        raise InputError(
            f"--capacity-tokens: {len(values)} values for {len(backends)} backends "
            "(give one for all, or one per backend)"
        )
    return tuple(values)
