"""``fairsim calibrate --backend torch``: time the grid on a Llama built from its config in plain PyTorch.

No vLLM and no download: the model is built from a Hugging Face ``config.json`` (hidden size,
layers, heads, KV heads, intermediate size, vocabulary) with random weights, bf16 on a GPU and
fp32 on a CPU. One step is what vLLM's model runner computes for a flattened batch: the
embedding, per layer RMSNorm, q/k/v projections, rotary embedding, attention of each request's
new tokens over its cached prefix and themselves (``torch.nn.functional.scaled_dot_product_attention``
with the KV buffer of the prefix, grouped-query), the output projection, RMSNorm and the SwiGLU MLP,
then the final norm and the LM head on each request's last token. The cached prefix's K and V are
random tensors made before the timer starts (``make_caches``). Timed with ``time.perf_counter`` around the step
(after ``torch.cuda.synchronize`` on a GPU).

What it is not: a vLLM engine (no scheduler, no paged KV, no CUDA graphs, no sampling), so the
profile it writes is labelled "torch-level, not vLLM".
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibration.grid import StepPoint

TINY_CONFIG = Path(__file__).resolve().parent.parent / "fairsim" / "live" / "tiny_llama" / "config.json"
LLAMA31_8B_CONFIG = Path(__file__).resolve().parent / "configs" / "llama-3.1-8b.json"


@dataclass(frozen=True)
class LlamaShape:
    """The shape of a Llama model (Hugging Face ``config.json`` keys)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_file(cls, path: str | Path) -> LlamaShape:
        """Read a ``config.json``.

        Raises:
            ValueError: Not readable JSON, or a key missing or not a positive integer (named).
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"--model-config {path}: cannot read it as JSON: {exc}") from exc
        values: dict[str, Any] = {}
        for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
            v = data.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"--model-config {path}: '{key}' must be an integer >= 1, got {v!r}")
            values[key] = v
        values["num_key_value_heads"] = int(data.get("num_key_value_heads", values["num_attention_heads"]))
        if values["hidden_size"] % values["num_attention_heads"] or values["num_attention_heads"] % values["num_key_value_heads"]:
            raise ValueError(f"--model-config {path}: hidden_size must divide by num_attention_heads, and that "
                             f"by num_key_value_heads")
        values["rms_norm_eps"] = float(data.get("rms_norm_eps", 1e-5))
        values["rope_theta"] = float(data.get("rope_theta", 10000.0))
        return cls(**values)

    def parameters(self) -> int:
        """Parameter count (embedding, layers, final norm, untied LM head)."""
        h, i, kv = self.hidden_size, self.intermediate_size, self.num_key_value_heads * self.head_dim
        layer = h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h
        return 2 * self.vocab_size * h + self.num_hidden_layers * layer + h


class TorchLlama:
    """A Llama of ``shape`` with random weights on ``device`` (bf16 on CUDA, fp32 on CPU).

    Args:
        shape: The model's shape.
        device: ``"cuda"``, ``"cpu"`` or None for CUDA when available.
        seed: Seed of the random weights and caches (timings do not depend on values).
    """

    def __init__(self, shape: LlamaShape, device: str | None = None, seed: int = 0) -> None:
        import torch

        self.torch = torch
        self.shape = shape
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        gen = torch.Generator(device="cpu").manual_seed(seed)
        s = shape
        kv = s.num_key_value_heads * s.head_dim

        def w(*dims: int) -> Any:
            return (torch.randn(*dims, generator=gen) * 0.02).to(self.device, self.dtype)

        self.embed = w(s.vocab_size, s.hidden_size)
        self.layers = [{"wq": w(s.hidden_size, s.hidden_size), "wk": w(kv, s.hidden_size), "wv": w(kv, s.hidden_size),
                        "wo": w(s.hidden_size, s.hidden_size), "gate": w(s.intermediate_size, s.hidden_size),
                        "up": w(s.intermediate_size, s.hidden_size), "down": w(s.hidden_size, s.intermediate_size),
                        "n1": torch.ones(s.hidden_size, device=self.device, dtype=self.dtype),
                        "n2": torch.ones(s.hidden_size, device=self.device, dtype=self.dtype)}
                       for _ in range(s.num_hidden_layers)]
        self.norm = torch.ones(s.hidden_size, device=self.device, dtype=self.dtype)
        self.lm_head = w(s.vocab_size, s.hidden_size)
        self.gen = gen
        self.cache_gen = torch.Generator(device=self.device).manual_seed(seed)

    def _rms(self, x: Any, weight: Any) -> Any:
        x32 = x.float()
        return (x32 * self.torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.shape.rms_norm_eps)).to(x.dtype) * weight

    def _rope(self, x: Any, positions: Any) -> Any:
        """Rotary embedding (rotate-half form) of ``x`` [tokens, heads, head_dim] at ``positions``."""
        torch = self.torch
        half = self.shape.head_dim // 2
        freq = 1.0 / (self.shape.rope_theta ** (torch.arange(half, device=self.device, dtype=torch.float32) / half))
        angle = positions.float()[:, None] * freq[None, :]
        cos, sin = angle.cos()[:, None, :].to(x.dtype), angle.sin()[:, None, :].to(x.dtype)
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def make_caches(self, point: StepPoint) -> list[list[tuple[Any, Any]]]:
        """KV buffers of each request, per layer: [layer][request] -> (K, V) of shape
        [kv_heads, context + new, head_dim], the cached prefix random, room for the new tokens.

        Requests with the same (context, new tokens) share one buffer: the values do not change
        the timing, and 256 decodes at 32k context would otherwise need 256 x 32k tokens of KV
        (1 TiB for an 8B model). Each request's attention still reads the whole buffer.
        """
        s, torch = self.shape, self.torch
        out = []
        for _ in range(s.num_hidden_layers):
            shared: dict[tuple[int, int], tuple[Any, Any]] = {}
            for n, k in zip(point.new_tokens, point.context_tokens):
                if (k, n) not in shared:
                    shared[(k, n)] = tuple(torch.randn(s.num_key_value_heads, k + n, s.head_dim, device=self.device,
                                                       dtype=self.dtype, generator=self.cache_gen) for _ in range(2))
            out.append([shared[(k, n)] for n, k in zip(point.new_tokens, point.context_tokens)])
        return out

    def step(self, point: StepPoint, caches: list[list[tuple[Any, Any]]]) -> Any:
        """One forward step of ``point`` on random tokens (logits of each request's last token)."""
        tokens = self.torch.randint(0, self.shape.vocab_size, (sum(point.new_tokens),), generator=self.gen)
        return self.forward(tokens.to(self.device), point.new_tokens, point.context_tokens, caches)

    def forward(self, tokens: Any, ns: tuple[int, ...], ks: tuple[int, ...], caches: list[list[tuple[Any, Any]]],
                capture: list | None = None) -> Any:
        """The model on a flattened batch: request ``i`` computes ``ns[i]`` tokens on ``ks[i]`` cached.

        Args:
            tokens: Token ids, shape (sum(ns),), request after request.
            caches: [layer][request] -> (K, V) buffers [kv_heads, ks[i] + ns[i], head_dim]: the cached
                prefix in ``[:ks[i]]``; the step writes its new K/V into ``[ks[i]:]`` (as vLLM
                writes a step's KV into its paged cache, without copying the prefix).
            capture: When a list, each layer's (K, V) buffers of request 0 are appended (a test
                feeds them back as a cache).

        Returns:
            Logits of each request's last token, shape (len(ns), vocab).
        """
        torch, s = self.torch, self.shape
        F = torch.nn.functional
        total = sum(ns)
        positions = torch.cat([torch.arange(k, k + n) for n, k in zip(ns, ks)]).to(self.device)
        x = self.embed[tokens]
        hd, nh, nkv = s.head_dim, s.num_attention_heads, s.num_key_value_heads
        for layer, cache in zip(self.layers, caches):
            h = self._rms(x, layer["n1"])
            q = self._rope((h @ layer["wq"].T).view(total, nh, hd), positions)
            k = self._rope((h @ layer["wk"].T).view(total, nkv, hd), positions)
            v = (h @ layer["wv"].T).view(total, nkv, hd)
            outs, start = [], 0
            for i, (n, ctx, (ck, cv)) in enumerate(zip(ns, ks, cache)):
                qi = q[start:start + n].transpose(0, 1)
                ck[:, ctx:ctx + n] = k[start:start + n].transpose(0, 1)
                cv[:, ctx:ctx + n] = v[start:start + n].transpose(0, 1)
                ki, vi = ck[:, :ctx + n], cv[:, :ctx + n]
                if capture is not None and i == 0:
                    capture.append((ki, vi))
                mask = None
                if n > 1:  # causal over the new tokens, all of the cached prefix visible
                    mask = torch.ones(n, ctx + n, dtype=torch.bool, device=self.device).tril(diagonal=ctx)
                outs.append(F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, enable_gqa=nkv != nh)
                            .transpose(0, 1).reshape(n, nh * hd))
                start += n
            x = x + torch.cat(outs) @ layer["wo"].T
            h = self._rms(x, layer["n2"])
            x = x + (F.silu(h @ layer["gate"].T) * (h @ layer["up"].T)) @ layer["down"].T
        last = torch.tensor([sum(ns[: i + 1]) - 1 for i in range(len(ns))], device=self.device)
        return self._rms(x[last], self.norm) @ self.lm_head.T

    def time_step(self, point: StepPoint, repeats: int, statistic: str = "median") -> tuple[float, list[float]]:
        """Seconds of one step of ``point`` (``statistic`` of ``repeats`` timings after one warm-up)."""
        torch = self.torch
        caches = self.make_caches(point)
        times = []
        with torch.inference_mode():
            self.step(point, caches)  # warm-up: kernel selection, allocator
            for _ in range(repeats):
                self._sync()
                t0 = time.perf_counter()
                self.step(point, caches)
                self._sync()
                times.append(time.perf_counter() - t0)
        return (min(times) if statistic == "min" else statistics.median(times)), times

    def idle_seconds(self, length: int, budget: int, repeats: int, statistic: str = "median") -> float:
        """``T_idle``: a cold ``length``-token prompt alone, one ``budget``-token chunk per step (s)."""
        total, done = 0.0, 0
        while done < length:
            n = min(budget, length - done)
            total += self.time_step(StepPoint("cold prefill" if done == 0 else "cached prefill", (n,), (done,), (False,)),
                                    repeats, statistic)[0]
            done += n
        return total

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def describe(self) -> str | None:
        """The GPU's name, or None on a CPU (the caller names the CPU)."""
        if self.device.type == "cuda":
            return self.torch.cuda.get_device_name(self.device)
        return None


def kv_bytes_per_token(shape: LlamaShape, dtype_bytes: int) -> int:
    """KV bytes of one token: 2 (K, V) x layers x KV heads x head dim x dtype bytes."""
    return 2 * shape.num_hidden_layers * shape.num_key_value_heads * shape.head_dim * dtype_bytes


def weight_bytes(shape: LlamaShape, dtype_bytes: int) -> float:
    """Bytes of the weights."""
    return float(shape.parameters() * dtype_bytes)
