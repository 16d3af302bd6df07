#!/usr/bin/env python3
"""Record real PyTorch allocation traces in RAPIDS RMM's CSV log format.

Each workload runs in its own fresh process, with CUDA memory history recording switched
on before the workload makes its first CUDA allocation (model construction and the move
to the GPU are part of the trace). After the workload, the allocator's trace
(`torch.cuda.memory._snapshot()["device_traces"][0]`) is converted:

  alloc          -> allocate  (Size: the trace entry's size, i.e. the block's requested size)
  free_completed -> free      (the block is back in the allocator's pool, reusable)

free_requested, segment_alloc/free/map/unmap, snapshot are not tensor allocations and
are dropped; an `oom` entry makes the recording fail. The converted log is validated
(every free matches a live allocation, no pointer allocated twice while live, no
allocation of size 0, nothing dropped by the ring buffer, first event after recording
started) before it is written as data/traces/<name>.csv.gz.

Usage (on a machine with a CUDA GPU):
    PYTHONUNBUFFERED=1 python3 scripts/traces/record.py [--out data/traces] [--jobs 4] [names...]
    python3 scripts/traces/record.py --smoke [names...]   # CPU, tiny sizes, no recording
Writes <out>/<name>.csv.gz (<out>/heldout/<name>.csv.gz for the held-out workloads
t5_seq2seq, gan_train, serve_varbatch, segment_train, moe_train, tiny_gpt, lora_finetune,
video_train, gnn_train, beam_search, recsys_train, vae_decode) and <out>/recording.json (the real-run figures;
entries for workloads not run this time are kept). WORKLOAD_ENV below gives the few environment
variables a workload's process is started with.
"""

import argparse
import gc
import gzip
import json
import math
import os
import random
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MAX_ENTRIES = 20_000_000

# ----------------------------------------------------------------------------------------
# workloads: each takes (dev, smoke) and returns a dict of facts to record (or None)
# ----------------------------------------------------------------------------------------


def _torch():
    import torch

    return torch


def wl_llm_decode(dev, smoke):
    """LLaMA-shaped decoder, bf16, greedy generate() with a DynamicCache (KV cache grows
    by torch.cat each token)."""
    torch = _torch()
    from transformers import LlamaConfig, LlamaForCausalLM

    if smoke:
        cfg = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=4)
        B, P, N = 2, 8, 8
    else:
        cfg = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=6,
                   num_attention_heads=16, num_key_value_heads=16)
        B, P, N = 8, 128, 256
    config = LlamaConfig(max_position_embeddings=2048, **cfg)
    model = LlamaForCausalLM(config)  # random weights, built on the CPU in fp32
    model = model.to(dev, torch.bfloat16).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, cfg["vocab_size"], (B, P), generator=g).to(dev)
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=N,
                             min_new_tokens=N, do_sample=False, use_cache=True,
                             pad_token_id=0)
    assert out.shape == (B, P + N), out.shape
    return dict(batch=B, prompt=P, new_tokens=N, config=cfg, dtype="bfloat16",
                params=sum(p.numel() for p in model.parameters()))


def wl_varlen_batches(dev, smoke):
    """BERT-base masked-LM training, fp32 (TF32 off, PyTorch default), AdamW; each batch
    padded to its own random length."""
    torch = _torch()
    from transformers import BertConfig, BertForMaskedLM

    if smoke:
        cfg = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=128)
        B, steps, lmin, lmax = 2, 3, 8, 32
    else:
        cfg = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                   intermediate_size=3072)
        B, steps, lmin, lmax = 16, 32, 32, 512
    model = BertForMaskedLM(BertConfig(max_position_embeddings=512, **cfg)).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    lengths = []
    for _ in range(steps):
        L = rng.randint(lmin, lmax)
        lengths.append(L)
        ids = torch.randint(5, cfg["vocab_size"], (B, L), generator=g)
        # per-sample lengths within the batch (dynamic padding to the longest)
        lens = torch.randint(max(1, L // 2), L + 1, (B,), generator=g)
        lens[0] = L
        mask = (torch.arange(L)[None, :] < lens[:, None]).long()
        labels = torch.where((torch.rand(B, L, generator=g) < 0.15) & (mask == 1), ids,
                             torch.full_like(ids, -100))
        ids, mask, labels = ids.to(dev), mask.to(dev), labels.to(dev)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    return dict(batch=B, steps=steps, lengths=lengths, config=cfg, dtype="float32",
                optimizer="AdamW (foreach)")


def wl_model_swap(dev, smoke):
    """Load / run / unload ResNet-50, ViT-B/16 and GPT-2 small in turn, twice; nothing
    emptied between models."""
    torch = _torch()
    import copy

    import torchvision
    from transformers import GPT2Config, GPT2LMHeadModel

    if smoke:
        cpu_models = [
            ("resnet18", torchvision.models.resnet18(weights=None), "img", 2, 64),
            ("gpt2-tiny", GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000)),
             "tok", 2, 16),
        ]
        fwd, cycles = 2, 2
    else:
        cpu_models = [
            ("resnet50", torchvision.models.resnet50(weights=None), "img", 32, 224),
            ("vit_b_16", torchvision.models.vit_b_16(weights=None), "img", 32, 224),
            ("gpt2", GPT2LMHeadModel(GPT2Config()), "tok", 8, 512),
        ]
        fwd, cycles = 3, 2
    g = torch.Generator().manual_seed(0)
    log = []
    for c in range(cycles):
        for name, cpu_model, kind, B, S in cpu_models:
            model = copy.deepcopy(cpu_model).to(dev).eval()  # "load": CPU weights -> GPU
            with torch.inference_mode():
                for _ in range(fwd):
                    if kind == "img":
                        x = torch.randn(B, 3, S, S, generator=g).to(dev)
                        y = model(x)
                    else:
                        x = torch.randint(0, model.config.vocab_size, (B, S), generator=g).to(dev)
                        y = model(input_ids=x).logits
                    float(y.float().mean())
            del model, x, y  # unload; no empty_cache()
            gc.collect()
            log.append(name)
    return dict(sequence=log, forwards_per_load=fwd, dtype="float32",
                shapes={n: (B, S) for n, _, _, B, S in cpu_models})


def _diffusers():
    try:
        import diffusers  # noqa: F401

        return "installed"
    except ImportError:
        pass
    wheels = os.path.join(HERE, "wheels")
    if os.path.isdir(wheels):
        for f in sorted(os.listdir(wheels)):
            if f.startswith("diffusers-") and f.endswith(".whl"):
                sys.path.insert(0, os.path.join(wheels, f))
                try:
                    import diffusers  # noqa: F401,F811

                    return "wheel " + f
                except Exception as e:  # noqa: BLE001
                    print(f"diffusers from {f} failed: {e!r}", file=sys.stderr)
                    sys.path.pop(0)
    return None


def _own_unet(torch, ch=(128, 256, 512, 512), tdim=512, ctx_dim=768):
    nn = torch.nn
    F = torch.nn.functional

    class Res(nn.Module):
        def __init__(self, i, o):
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(32, i), nn.Conv2d(i, o, 3, padding=1)
            self.t = nn.Linear(tdim, o)
            self.n2, self.c2 = nn.GroupNorm(32, o), nn.Conv2d(o, o, 3, padding=1)
            self.skip = nn.Conv2d(i, o, 1) if i != o else nn.Identity()

        def forward(self, x, t):
            h = self.c1(F.silu(self.n1(x))) + self.t(t)[:, :, None, None]
            h = self.c2(F.silu(self.n2(h)))
            return self.skip(x) + h

    class Attn(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.n = nn.GroupNorm(32, c)
            self.ln1, self.ln2, self.ln3 = nn.LayerNorm(c), nn.LayerNorm(c), nn.LayerNorm(c)
            self.sa = nn.MultiheadAttention(c, 8, batch_first=True)
            self.ca = nn.MultiheadAttention(c, 8, kdim=ctx_dim, vdim=ctx_dim, batch_first=True)
            self.ff = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))

        def forward(self, x, ctx):
            b, c, hh, ww = x.shape
            h = self.n(x).flatten(2).transpose(1, 2)
            q = self.ln1(h)
            h = h + self.sa(q, q, q, need_weights=False)[0]
            h = h + self.ca(self.ln2(h), ctx, ctx, need_weights=False)[0]
            h = h + self.ff(self.ln3(h))
            return x + h.transpose(1, 2).reshape(b, c, hh, ww)

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.temb = nn.Sequential(nn.Linear(ch[0], tdim), nn.SiLU(), nn.Linear(tdim, tdim))
            self.cin = nn.Conv2d(4, ch[0], 3, padding=1)
            self.down, self.dattn, self.ds = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
            c_prev, skips = ch[0], [ch[0]]
            for lvl, c in enumerate(ch):
                for _ in range(2):
                    self.down.append(Res(c_prev, c))
                    self.dattn.append(Attn(c) if lvl >= 1 else nn.Identity())
                    c_prev = c
                    skips.append(c)
                if lvl < len(ch) - 1:
                    self.ds.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                    skips.append(c)
            self.mid1, self.mattn, self.mid2 = Res(c_prev, c_prev), Attn(c_prev), Res(c_prev, c_prev)
            self.up, self.uattn, self.us = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
            for lvl, c in reversed(list(enumerate(ch))):
                for _ in range(3):
                    self.up.append(Res(c_prev + skips.pop(), c))
                    self.uattn.append(Attn(c) if lvl >= 1 else nn.Identity())
                    c_prev = c
                if lvl > 0:
                    self.us.append(nn.Conv2d(c, c, 3, padding=1))
            self.nout, self.cout = nn.GroupNorm(32, c_prev), nn.Conv2d(c_prev, 4, 3, padding=1)

        def forward(self, x, t, ctx):
            half = ch[0] // 2
            f = torch.exp(-math.log(10000) * torch.arange(half, device=x.device) / half)
            e = t.float()[:, None] * f[None]
            temb = self.temb(torch.cat([e.sin(), e.cos()], 1).to(x.dtype))
            h = self.cin(x)
            hs = [h]
            k = 0
            for lvl in range(len(ch)):
                for _ in range(2):
                    h = self.down[k](h, temb)
                    a = self.dattn[k]
                    h = a(h, ctx) if isinstance(a, Attn) else h
                    hs.append(h)
                    k += 1
                if lvl < len(ch) - 1:
                    h = self.ds[lvl](h)
                    hs.append(h)
            h = self.mid2(self.mattn(self.mid1(h, temb), ctx), temb)
            k = 0
            for j, lvl in enumerate(reversed(range(len(ch)))):
                for _ in range(3):
                    h = self.up[k](torch.cat([h, hs.pop()], 1), temb)
                    a = self.uattn[k]
                    h = a(h, ctx) if isinstance(a, Attn) else h
                    k += 1
                if lvl > 0:
                    h = self.us[j](F.interpolate(h, scale_factor=2.0, mode="nearest"))
            return self.cout(F.silu(self.nout(h)))

    return UNet()


def wl_unet_diffusion(dev, smoke):
    """Stable-Diffusion-1.x-shaped UNet (diffusers UNet2DConditionModel, random weights;
    falls back to a torch.nn UNet if diffusers is missing), fp16, DDIM sampling with
    classifier-free guidance."""
    torch = _torch()
    src = _diffusers()
    B = 1 if smoke else 4
    steps = 2 if smoke else 30
    lat = 8 if smoke else 64
    ctx_len, ctx_dim = 77, 768
    dtype = torch.float32 if smoke else torch.float16
    if src:
        from diffusers import DDIMScheduler, UNet2DConditionModel

        if smoke:
            unet = UNet2DConditionModel(sample_size=lat, block_out_channels=(32, 64),
                                        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
                                        cross_attention_dim=ctx_dim, layers_per_block=1)
        else:
            unet = UNet2DConditionModel(sample_size=lat, cross_attention_dim=ctx_dim,
                                        attention_head_dim=8)  # SD 1.x layout
        unet = unet.to(dev, dtype).eval()
        sched = DDIMScheduler(num_train_timesteps=1000, beta_schedule="scaled_linear",
                              beta_start=0.00085, beta_end=0.012, clip_sample=False,
                              set_alpha_to_one=False)
        sched.set_timesteps(steps)
        timesteps = sched.timesteps
        step = lambda eps, t, x: sched.step(eps, t, x).prev_sample  # noqa: E731
        run = lambda x, t, c: unet(x, t, encoder_hidden_states=c).sample  # noqa: E731
        kind = "diffusers UNet2DConditionModel (" + src + ")"
    else:
        unet = _own_unet(torch).to(dev, dtype).eval()
        betas = torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=torch.float64) ** 2
        acp = torch.cumprod(1 - betas, 0).float().to(dev)
        timesteps = torch.arange(999, -1, -1000 // steps)[:steps]

        def step(eps, t, x):
            a = acp[t]
            tp = t - 1000 // steps
            ap = acp[tp] if tp >= 0 else torch.tensor(1.0, device=dev)
            x0 = (x - (1 - a).sqrt() * eps) / a.sqrt()
            return ap.sqrt() * x0 + (1 - ap).sqrt() * eps

        run = lambda x, t, c: unet(x, t.expand(x.shape[0]).to(dev), c)  # noqa: E731
        kind = "torch.nn UNet (diffusers not available)"
    g = torch.Generator().manual_seed(0)
    ctx = torch.randn(2 * B, ctx_len, ctx_dim, generator=g).to(dev, dtype)  # uncond + cond
    x = torch.randn(B, 4, lat, lat, generator=g).to(dev, dtype)
    guidance = 7.5
    with torch.inference_mode():
        for t in timesteps:
            eps = run(torch.cat([x, x]), t.to(dev) if hasattr(t, "to") else t, ctx)
            e_u, e_c = eps.chunk(2)
            eps = e_u + guidance * (e_c - e_u)
            x = step(eps, t, x)
        float(x.float().mean())
    return dict(unet=kind, batch=B, cfg_batch=2 * B, latent=(4, lat, lat), steps=steps,
                dtype=str(dtype), params=sum(p.numel() for p in unet.parameters()))


def _train_steps(torch, model, opt, batches, dev, autocast=None, scaler=None, loss_fn=None):
    for xb, yb in batches:
        xb, yb = xb.to(dev), yb.to(dev)
        if autocast is not None:
            with torch.autocast(dev.type, dtype=autocast):
                loss = loss_fn(model(xb), yb)
        else:
            loss = loss_fn(model(xb), yb)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)
    return float(loss)


def wl_vit_finetune(dev, smoke):
    """torchvision ViT-B/16 fine-tune, batch 32 x 224^2, bf16 autocast, AdamW."""
    torch = _torch()
    import torchvision

    if smoke:
        model = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=2,
                                                     num_heads=2, hidden_dim=32, mlp_dim=64,
                                                     num_classes=10)
        B, S, steps, nc = 2, 32, 2, 10
    else:
        model = torchvision.models.vit_b_16(weights=None, num_classes=100)
        B, S, steps, nc = 32, 224, 8, 100
    model = model.to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(B, 3, S, S, generator=g), torch.randint(0, nc, (B,), generator=g))
               for _ in range(steps)]
    _train_steps(torch, model, opt, batches, dev, autocast=torch.bfloat16,
                 loss_fn=torch.nn.functional.cross_entropy)
    return dict(batch=B, image=S, steps=steps, dtype="bf16 autocast", optimizer="AdamW")


def wl_bert_finetune(dev, smoke):
    """BERT-base sequence classification fine-tune, batch 32 x 128 tokens, fp32, AdamW."""
    torch = _torch()
    from transformers import BertConfig, BertForSequenceClassification

    if smoke:
        cfg = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=128)
        B, L, steps = 2, 16, 2
    else:
        cfg = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                   intermediate_size=3072)
        B, L, steps = 32, 128, 10
    model = BertForSequenceClassification(BertConfig(num_labels=2, **cfg)).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        ids = torch.randint(5, cfg["vocab_size"], (B, L), generator=g).to(dev)
        y = torch.randint(0, 2, (B,), generator=g).to(dev)
        loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=y).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    return dict(batch=B, seq=L, steps=steps, dtype="float32", optimizer="AdamW")


def wl_mixed_precision(dev, smoke):
    """torchvision ConvNeXt-Tiny training, batch 64 x 224^2, fp16 autocast + GradScaler,
    AdamW."""
    torch = _torch()
    import torchvision

    if smoke:
        B, S, steps = 2, 64, 2
    else:
        B, S, steps = 64, 224, 8
    model = torchvision.models.convnext_tiny(weights=None, num_classes=1000).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(dev.type)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(B, 3, S, S, generator=g), torch.randint(0, 1000, (B,), generator=g))
               for _ in range(steps)]
    _train_steps(torch, model, opt, batches, dev,
                 autocast=torch.float16 if dev.type == "cuda" else torch.bfloat16,
                 scaler=scaler, loss_fn=torch.nn.functional.cross_entropy)
    return dict(batch=B, image=S, steps=steps, dtype="fp16 autocast + GradScaler",
                optimizer="AdamW")


def _gpt(torch, vocab, d, n_layer, n_head, seq):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, 2)
            q, k, v = (z.view(b, t, n_head, d // n_head).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.wte.weight
            self.checkpoint = False

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                if self.checkpoint:
                    x = torch.utils.checkpoint.checkpoint(blk, x, use_reentrant=False)
                else:
                    x = blk(x)
            return self.head(self.ln(x))

    return GPT()


def wl_checkpointing(dev, smoke):
    """GPT (24 layers, d=1024, 16 heads, vocab 50257), batch 8 x 1024, bf16 autocast,
    torch.utils.checkpoint (non-reentrant) on every block, AdamW."""
    torch = _torch()
    import torch.utils.checkpoint  # noqa: F401

    if smoke:
        V, d, nl, nh, T, B, steps = 1000, 64, 2, 4, 32, 2, 2
    else:
        V, d, nl, nh, T, B, steps = 50257, 1024, 24, 16, 1024, 8, 4
    model = _gpt(torch, V, d, nl, nh, T).to(dev).train()
    model.checkpoint = True
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        idx = torch.randint(0, V, (B, T + 1), generator=g).to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(idx[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                                     idx[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    return dict(vocab=V, d=d, layers=nl, heads=nh, seq=T, batch=B, steps=steps,
                dtype="bf16 autocast", params=sum(p.numel() for p in model.parameters()))


def wl_small_loop(dev, smoke):
    """Tiny CNN (3 conv + 2 linear), batch 32 x 3x32x32, fp32, Adam, 200 steps."""
    torch = _torch()
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(128 * 4 * 4, 256), nn.ReLU(), nn.Linear(256, 10),
    ).to(dev).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    B, steps = 32, (3 if smoke else 200)
    g = torch.Generator().manual_seed(0)
    data = torch.randn(16, B, 3, 32, 32, generator=g)  # a small "dataset" of 16 batches on the CPU
    labels = torch.randint(0, 10, (16, B), generator=g)
    batches = [(data[i % 16], labels[i % 16]) for i in range(steps)]
    _train_steps(torch, model, opt, batches, dev, loss_fn=nn.functional.cross_entropy)
    return dict(batch=B, image=32, steps=steps, dtype="float32", optimizer="Adam",
                params=sum(p.numel() for p in model.parameters()))


def wl_small_mlp(dev, smoke):
    """MLP 784-1024-1024-10, batch 512, fp32, SGD with momentum, 200 steps; data on the GPU."""
    torch = _torch()
    nn = torch.nn
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10)).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    B, steps = 512, (3 if smoke else 200)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(4 * B, 784, generator=g).to(dev)  # the whole "dataset" lives on the GPU
    Y = torch.randint(0, 10, (4 * B,), generator=g).to(dev)
    for i in range(steps):
        j = torch.randint(0, 4 * B, (B,), generator=g).to(dev)
        loss = nn.functional.cross_entropy(model(X[j]), Y[j])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    return dict(batch=B, steps=steps, dtype="float32", optimizer="SGD momentum",
                params=sum(p.numel() for p in model.parameters()))


def wl_detection(dev, smoke):
    """torchvision Faster R-CNN ResNet-50-FPN (weights=None, weights_backbone=None):
    3 training steps (SGD) then 4 inference batches, 4 images of varied sizes each."""
    torch = _torch()
    import torchvision

    model = torchvision.models.detection.fasterrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=91).to(dev)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01,
                          momentum=0.9)
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    sizes = [(480, 640), (600, 800), (512, 512), (720, 1280), (800, 600), (640, 480)]
    if smoke:
        sizes = [(96, 128), (128, 96)]
    train_steps, eval_batches, per = (1, 1, 2) if smoke else (3, 4, 4)

    def images():
        return [torch.rand(3, *rng.choice(sizes), generator=g).to(dev) for _ in range(per)]

    model.train()
    for _ in range(train_steps):
        imgs = images()
        targets = []
        for im in imgs:
            h, w = im.shape[1:]
            n = rng.randint(1, 6)
            xy = torch.rand(n, 2, generator=g) * torch.tensor([w * 0.6, h * 0.6])
            wh = torch.rand(n, 2, generator=g) * torch.tensor([w * 0.3, h * 0.3]) + 8
            boxes = torch.cat([xy, xy + wh], 1)
            targets.append(dict(boxes=boxes.to(dev),
                                labels=torch.randint(1, 91, (n,), generator=g).to(dev)))
        losses = model(imgs, targets)
        loss = sum(losses.values())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    model.eval()
    with torch.inference_mode():
        for _ in range(eval_batches):
            out = model(images())
            sum(len(o["boxes"]) for o in out)
    return dict(images_per_batch=per, train_steps=train_steps, eval_batches=eval_batches,
                sizes=sizes, dtype="float32")


def wl_lstm_train(dev, smoke):
    """2-layer LSTM (cuDNN), input 512, hidden 1024, batch 32, sequence length 64..256
    varying per step, linear head on every step, fp32, Adam, 12 steps."""
    torch = _torch()
    nn = torch.nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(512, 1024, num_layers=2, batch_first=True)
            self.head = nn.Linear(1024, 512)

        def forward(self, x):
            return self.head(self.lstm(x)[0])

    model = M().to(dev).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    steps = 2 if smoke else 12
    lengths = []
    for _ in range(steps):
        T = rng.randint(64, 256) if not smoke else 8
        lengths.append(T)
        x = torch.randn(32, T, 512, generator=g).to(dev)
        y = torch.randn(32, T, 512, generator=g).to(dev)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    return dict(batch=32, lengths=lengths, steps=steps, dtype="float32", optimizer="Adam")


# ----------------------------------------------------------------------------------------
# held-out workloads: recorded after vrampool's default policy constants were chosen on
# the fifteen traces above, and written to <out>/heldout/ (see HELD_OUT below)
# ----------------------------------------------------------------------------------------


def wl_t5_seq2seq(dev, smoke):
    """T5-base-shaped encoder-decoder (transformers T5ForConditionalGeneration from
    T5Config: 12 encoder + 12 decoder layers, d_model 768, 12 heads, d_kv 64, d_ff 3072
    (ReLU), vocab 32128, dropout 0.1, random weights), seq2seq training in fp32 (TF32 off,
    PyTorch's default) with AdamW (foreach, lr 1e-4), 24 steps at batch 16. Each batch has
    its own random source length (uniform in [32, 512]) and target length (uniform in
    [8, 128]); within a batch each source has a random length >= half the batch's
    (attention_mask, pad id 0) and each target a random length >= half (padding labels
    are -100); the decoder inputs are the labels shifted right by the model."""
    torch = _torch()
    from transformers import T5Config, T5ForConditionalGeneration

    if smoke:
        cfg = dict(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                   num_decoder_layers=2, num_heads=4)
        B, steps, src, tgt = 2, 3, (8, 32), (4, 16)
    else:
        cfg = dict(vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12,
                   num_decoder_layers=12, num_heads=12)
        B, steps, src, tgt = 16, 24, (32, 512), (8, 128)
    config = T5Config(dropout_rate=0.1, feed_forward_proj="relu", pad_token_id=0,
                      eos_token_id=1, decoder_start_token_id=0, **cfg)
    model = T5ForConditionalGeneration(config).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    V = cfg["vocab_size"]
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    lengths = []
    for _ in range(steps):
        S, T = rng.randint(*src), rng.randint(*tgt)
        lengths.append((S, T))
        slen = torch.randint(max(1, S // 2), S + 1, (B,), generator=g)
        slen[0] = S
        mask = (torch.arange(S)[None, :] < slen[:, None]).long()
        ids = torch.randint(2, V, (B, S), generator=g) * mask  # padding: id 0
        tlen = torch.randint(max(1, T // 2), T + 1, (B,), generator=g)
        tlen[0] = T
        labels = torch.randint(2, V, (B, T), generator=g)
        labels = torch.where(torch.arange(T)[None, :] < tlen[:, None], labels,
                             torch.full_like(labels, -100))
        ids, mask, labels = ids.to(dev), mask.to(dev), labels.to(dev)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    return dict(batch=B, steps=steps, lengths_src_tgt=lengths, config=cfg, dtype="float32",
                optimizer="AdamW (foreach)", params=sum(p.numel() for p in model.parameters()))


def wl_gan_train(dev, smoke):
    """DCGAN at 64x64 (the pytorch/examples dcgan layout with ngf = ndf = 128, fp32):
    generator z (100) -> ConvTranspose2d 4x4 stack 1024-512-256-128 -> 3 with BatchNorm +
    ReLU and Tanh (12.7 M params); discriminator Conv2d 4x4 stack 3 -> 128-256-512-1024 -> 1
    with LeakyReLU(0.2) + BatchNorm and Sigmoid (11.0 M params); N(0, 0.02) init. Two Adam
    optimizers (lr 2e-4, betas 0.5 / 0.999), BCELoss. 300 iterations at batch 256, each:
    D on a real batch (one of 8 CPU-side batches of uniform [-1, 1] images, copied to the
    GPU), D on G(z).detach(), D step; then G through D again, G step. Every 50 iterations
    (and after the last) G in eval mode draws 64 images from fixed noise under no_grad."""
    torch = _torch()
    nn = torch.nn

    nz, ngf, ndf = 100, (8 if smoke else 128), (8 if smoke else 128)
    B, iters, every, ndata = (4, 3, 2, 2) if smoke else (256, 300, 50, 8)
    S = 64

    G = nn.Sequential(
        nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
        nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh(),
    )
    D = nn.Sequential(
        nn.Conv2d(3, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 8), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid(),
    )

    def init(m):
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.zeros_(m.bias)

    G.apply(init)
    D.apply(init)
    G, D = G.to(dev).train(), D.to(dev).train()
    optD = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optG = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
    crit = nn.BCELoss()
    g = torch.Generator().manual_seed(0)
    data = torch.rand(ndata, B, 3, S, S, generator=g) * 2 - 1  # CPU-side "dataset"
    fixed = torch.randn(64, nz, 1, 1, generator=g).to(dev)
    samples = 0
    for it in range(iters):
        real = data[it % ndata].to(dev)
        # (1) D: maximise log D(x) + log(1 - D(G(z)))
        D.zero_grad(set_to_none=True)
        label = torch.full((B,), 1.0, device=dev)
        errD_real = crit(D(real).view(-1), label)
        errD_real.backward()
        z = torch.randn(B, nz, 1, 1, device=dev)
        fake = G(z)
        label.fill_(0.0)
        errD_fake = crit(D(fake.detach()).view(-1), label)
        errD_fake.backward()
        optD.step()
        # (2) G: maximise log D(G(z))
        G.zero_grad(set_to_none=True)
        label.fill_(1.0)
        errG = crit(D(fake).view(-1), label)
        errG.backward()
        optG.step()
        if (it + 1) % every == 0 or it == iters - 1:
            G.eval()
            with torch.no_grad():
                img = G(fixed)
                float(img.mean())
            G.train()
            samples += 1
            del img
    float(errD_real + errD_fake)
    float(errG)
    return dict(batch=B, iterations=iters, image=S, nz=nz, ngf=ngf, ndf=ndf, sample_every=every,
                sample_batches=samples, dtype="float32", optimizer="Adam x2 (lr 2e-4, betas 0.5/0.999)",
                params_G=sum(p.numel() for p in G.parameters()),
                params_D=sum(p.numel() for p in D.parameters()))


def wl_serve_varbatch(dev, smoke):
    """Inference server: torchvision ResNet-18 and ResNet-50 (weights=None) and GPT-2 small
    (transformers GPT2LMHeadModel(GPT2Config()), 124 M params), all fp32 in eval mode,
    loaded once and kept on the GPU, then 160 requests in a seeded random order under
    torch.no_grad: 45 % ResNet-50 and 30 % ResNet-18 requests, each a batch of a random
    size in [1, 64] at 3 x 224^2 copied from the CPU (top-5 of the logits back to the
    CPU); 25 % GPT-2 requests, each 1..8 prompts of a common random length in [16, 512]
    (all-ones attention_mask), greedy generate() of 1..6 new tokens (min_new_tokens =
    max_new_tokens, use_cache, DynamicCache), tokens back to the CPU."""
    torch = _torch()
    import torchvision
    from transformers import GPT2Config, GPT2LMHeadModel

    if smoke:
        gcfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128)
        n_req, img, bmax, lmax, pmax = 8, 64, 2, 32, 2
    else:
        gcfg = GPT2Config()
        n_req, img, bmax, lmax, pmax = 160, 224, 64, 512, 8
    models = dict(
        resnet50=torchvision.models.resnet50(weights=None).to(dev).eval(),
        resnet18=torchvision.models.resnet18(weights=None).to(dev).eval(),
        gpt2=GPT2LMHeadModel(gcfg).to(dev).eval(),
    )
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    log = []
    with torch.no_grad():
        for _ in range(n_req):
            u = rng.random()
            kind = "resnet50" if u < 0.45 else ("resnet18" if u < 0.75 else "gpt2")
            m = models[kind]
            if kind == "gpt2":
                B, L, N = rng.randint(1, pmax), rng.randint(16, lmax), rng.randint(1, 6)
                ids = torch.randint(0, gcfg.vocab_size, (B, L), generator=g).to(dev)
                out = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=N, min_new_tokens=N, do_sample=False,
                                 use_cache=True, pad_token_id=0)
                assert out.shape == (B, L + N), out.shape
                out[:, L:].cpu()
                log.append((kind, B, L, N))
                del ids, out
            else:
                B = rng.randint(1, bmax)
                x = torch.randn(B, 3, img, img, generator=g).to(dev)
                top = m(x).topk(5, dim=1).indices.cpu()
                assert top.shape == (B, 5)
                log.append((kind, B))
                del x
    return dict(requests=n_req, log=log, dtype="float32", grad="torch.no_grad",
                params={k: sum(p.numel() for p in v.parameters()) for k, v in models.items()})


def wl_segment_train(dev, smoke):
    """torchvision DeepLabV3-ResNet50 (weights=None, weights_backbone=None, 21 classes, no
    auxiliary head; output stride 8), multi-scale training in fp32 with SGD (momentum 0.9,
    weight decay 1e-4): 16 steps at batch 8, each at its own square or 3:4 crop size from
    384 to 640 pixels, per-pixel cross-entropy on random labels; then 4 inference batches
    of 2 images at 512 x 1024."""
    torch = _torch()
    import torchvision

    model = torchvision.models.segmentation.deeplabv3_resnet50(
        weights=None, weights_backbone=None, num_classes=21, aux_loss=False).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    sizes = [(384, 384), (448, 448), (512, 512), (576, 576), (640, 640), (480, 640)]
    B, steps, evals, eval_size, eval_b = 8, 16, 4, (512, 1024), 2
    if smoke:
        sizes = [(64, 64), (96, 96)]
        B, steps, evals, eval_size, eval_b = 2, 2, 1, (64, 128), 1
    model.train()
    used = []
    for _ in range(steps):
        h, w = rng.choice(sizes)
        used.append((h, w))
        x = torch.randn(B, 3, h, w, generator=g).to(dev)
        y = torch.randint(0, 21, (B, h, w), generator=g).to(dev)
        loss = torch.nn.functional.cross_entropy(model(x)["out"], y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    model.eval()
    with torch.inference_mode():
        for _ in range(evals):
            out = model(torch.randn(eval_b, 3, *eval_size, generator=g).to(dev))["out"]
            int(out.argmax(1).sum())
    return dict(batch=B, steps=steps, crop_sizes=used, eval_batches=evals, eval_batch=eval_b,
                eval_size=eval_size, dtype="float32", optimizer="SGD momentum",
                params=sum(p.numel() for p in model.parameters()))


def wl_moe_train(dev, smoke):
    """Mixtral-shaped sparse mixture-of-experts decoder (transformers MixtralForCausalLM from
    MixtralConfig: 8 layers, hidden 768, 12 heads with 4 KV heads, 8 experts of
    intermediate size 2048 with top-2 routing, vocab 32000, random weights), causal-LM
    training with bf16 autocast and AdamW (lr 1e-4): 20 steps at batch 8, each step its own
    sequence length (uniform in [128, 1024]); how many tokens each expert gets follows the
    router."""
    torch = _torch()
    from transformers import MixtralConfig, MixtralForCausalLM

    if smoke:
        cfg = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                   num_experts_per_tok=2)
        B, steps, lens = 2, 2, (16, 32)
    else:
        cfg = dict(vocab_size=32000, hidden_size=768, intermediate_size=2048,
                   num_hidden_layers=8, num_attention_heads=12, num_key_value_heads=4,
                   num_local_experts=8, num_experts_per_tok=2)
        B, steps, lens = 8, 20, (128, 1024)
    model = MixtralForCausalLM(MixtralConfig(max_position_embeddings=2048, **cfg)).to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    lengths = []
    for _ in range(steps):
        S = rng.randint(*lens)
        lengths.append(S)
        ids = torch.randint(0, cfg["vocab_size"], (B, S), generator=g).to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    return dict(batch=B, steps=steps, lengths=lengths, config=cfg, dtype="bf16 autocast",
                optimizer="AdamW", params=sum(p.numel() for p in model.parameters()))


def wl_tiny_gpt(dev, smoke):
    """A character-level GPT the size a browser tab trains: token + position embeddings,
    4 pre-norm transformer layers (torch.nn.TransformerEncoderLayer, d 128, 4 heads, FFN 512,
    dropout 0.1, causal mask), vocab 96, context 128; fp32, AdamW (lr 3e-4), 300 steps at
    batch 32, each batch 32 random windows of a 200 000-token random corpus kept on the CPU."""
    torch = _torch()
    nn = torch.nn
    V, d, layers, heads, T, B = 96, 128, 4, 4, 128, 32
    steps = 3 if smoke else 300

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(V, d)
            self.pos = nn.Embedding(T, d)
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True,
                                               norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, V, bias=False)

        def forward(self, x):
            t = x.shape[1]
            h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
            mask = nn.Transformer.generate_square_subsequent_mask(t, device=x.device)
            return self.head(self.norm(self.blocks(h, mask=mask, is_causal=True)))

    model = Tiny().to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(0)
    text = torch.randint(0, V, (200_000,), generator=g)
    for _ in range(steps):
        idx = torch.randint(0, text.numel() - T - 1, (B,), generator=g).tolist()
        x = torch.stack([text[j:j + T] for j in idx]).to(dev)
        y = torch.stack([text[j + 1:j + T + 1] for j in idx]).to(dev)
        loss = nn.functional.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    return dict(batch=B, context=T, steps=steps, d_model=d, layers=layers, dtype="float32",
                optimizer="AdamW", params=sum(p.numel() for p in model.parameters()))


def wl_lora_finetune(dev, smoke):
    """LLaMA-shaped decoder (transformers LlamaForCausalLM from LlamaConfig: 16 layers, hidden
    1024, 16 heads with 8 KV heads, intermediate size 2816, vocab 32000, random weights) moved
    to the GPU in bf16 and frozen, with LoRA adapters written here (rank 16, alpha 32, fp32,
    A random and B zero) on every attention q, k, v and o projection; causal-LM fine-tune of
    the adapters alone with AdamW (lr 2e-4): 24 steps at batch 4, each step its own sequence
    length (uniform in [128, 1536])."""
    torch = _torch()
    nn = torch.nn
    from transformers import LlamaConfig, LlamaForCausalLM

    if smoke:
        cfg = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2)
        B, steps, lens = 2, 2, (16, 32)
    else:
        cfg = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                   num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=8)
        B, steps, lens = 4, 24, (128, 1536)
    rank, alpha = 16, 32

    class LoRA(nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base = base
            self.a = nn.Parameter(torch.randn(rank, base.in_features, device=dev) * 0.01)
            self.b = nn.Parameter(torch.zeros(base.out_features, rank, device=dev))

        def forward(self, x):
            low = (x.float() @ self.a.t()) @ self.b.t()
            return self.base(x) + (low * (alpha / rank)).to(x.dtype)

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(max_position_embeddings=2048, **cfg))
    model = model.to(dev, dtype=torch.bfloat16)
    model.requires_grad_(False)
    for layer in model.model.layers:
        att = layer.self_attn
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(att, name, LoRA(getattr(att, name)))
    adapters = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(adapters, lr=2e-4)
    model.train()
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    lengths = []
    for _ in range(steps):
        S = rng.randint(*lens)
        lengths.append(S)
        ids = torch.randint(0, cfg["vocab_size"], (B, S), generator=g).to(dev)
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    return dict(batch=B, steps=steps, lengths=lengths, config=cfg, lora_rank=rank,
                lora_alpha=alpha, dtype="bf16 weights, fp32 adapters", optimizer="AdamW",
                params=sum(p.numel() for p in model.parameters()),
                trainable=sum(p.numel() for p in adapters))


def wl_video_train(dev, smoke):
    """torchvision r3d_18 (3D ResNet-18, weights=None, 400 classes), fp32, SGD (momentum 0.9,
    lr 0.01): 12 training steps at batch 8, each on clips of its own length (8, 12 or 16
    frames, random) at 112 x 112; then 3 inference batches of 16 clips of 16 frames under
    inference_mode."""
    torch = _torch()
    import torchvision

    model = torchvision.models.video.r3d_18(weights=None).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    B, steps, frames, side, evals, eval_b = 8, 12, (8, 12, 16), 112, 3, 16
    if smoke:
        B, steps, frames, side, evals, eval_b = 2, 2, (4, 8), 32, 1, 2
    model.train()
    used = []
    for _ in range(steps):
        T = rng.choice(frames)
        used.append(T)
        x = torch.randn(B, 3, T, side, side, generator=g).to(dev)
        y = torch.randint(0, 400, (B,), generator=g).to(dev)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    model.eval()
    with torch.inference_mode():
        for _ in range(evals):
            x = torch.randn(eval_b, 3, max(frames), side, side, generator=g).to(dev)
            int(model(x).argmax(1).sum())
    return dict(batch=B, steps=steps, clip_frames=used, side=side, eval_batches=evals,
                eval_batch=eval_b, dtype="float32", optimizer="SGD momentum",
                params=sum(p.numel() for p in model.parameters()))


def wl_gnn_train(dev, smoke):
    """A 3-layer graph convolutional network written with torch.index_add_ (mean over each
    node's in-edges and itself, then Linear; ReLU and dropout 0.5 between layers): node
    features 128 -> 256 -> 256 -> 16 classes, fp32, Adam (lr 1e-2). 40 steps, each on its own
    random graph made on the GPU (nodes uniform in [5 000, 150 000], 16 random out-edges per
    node, random features and labels), full-graph cross-entropy."""
    torch = _torch()
    nn = torch.nn
    F_in, hidden, classes, fanout = 128, 256, 16, 16
    steps, nodes = (2, (50, 100)) if smoke else (40, (5_000, 150_000))
    torch.manual_seed(0)
    lins = nn.ModuleList([nn.Linear(F_in, hidden), nn.Linear(hidden, hidden),
                          nn.Linear(hidden, classes)]).to(dev)
    opt = torch.optim.Adam(lins.parameters(), lr=1e-2)
    rng = random.Random(0)
    g = torch.Generator(device=dev).manual_seed(0)
    used = []
    for _ in range(steps):
        N = rng.randint(*nodes)
        used.append(N)
        E = N * fanout
        src = torch.randint(0, N, (E,), device=dev, generator=g)
        dst = torch.randint(0, N, (E,), device=dev, generator=g)
        x = torch.randn(N, F_in, device=dev, generator=g)
        y = torch.randint(0, classes, (N,), device=dev, generator=g)
        deg = torch.ones(N, device=dev).index_add_(0, dst, torch.ones(E, device=dev))
        h = x
        for i, lin in enumerate(lins):
            agg = torch.zeros_like(h).index_add_(0, dst, h[src]) + h
            h = lin(agg / deg[:, None])
            if i < len(lins) - 1:
                h = nn.functional.dropout(torch.relu(h), 0.5, training=True)
        loss = nn.functional.cross_entropy(h, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    return dict(steps=steps, nodes=used, fanout=fanout, features=F_in, hidden=hidden,
                classes=classes, dtype="float32", optimizer="Adam",
                params=sum(p.numel() for p in lins.parameters()))


def wl_beam_search(dev, smoke):
    """GPT-2-small-shaped decoder (transformers GPT2LMHeadModel from GPT2Config, random
    weights), bf16, beam search (4 beams, generate() with its DynamicCache, which the search
    reorders by index_select at every token): 12 requests in turn, each of a random batch
    (1, 2, 4 or 8 prompts), prompt length (16-512 tokens) and number of new tokens
    (16-128, all generated: min_new_tokens = max_new_tokens)."""
    torch = _torch()
    from transformers import GPT2Config, GPT2LMHeadModel

    if smoke:
        cfg = dict(vocab_size=1000, n_embd=64, n_layer=2, n_head=4)
        requests, batches, prompts, news = 2, (1, 2), (4, 8), (2, 4)
    else:
        cfg = dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12)
        requests, batches, prompts, news = 12, (1, 2, 4, 8), (16, 512), (16, 128)
    model = GPT2LMHeadModel(GPT2Config(n_positions=1024, **cfg))  # random weights, CPU fp32
    model = model.to(dev, torch.bfloat16).eval()
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    done = []
    with torch.inference_mode():
        for _ in range(requests):
            B, P, N = rng.choice(batches), rng.randint(*prompts), rng.randint(*news)
            ids = torch.randint(3, cfg["vocab_size"], (B, P), generator=g).to(dev)
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=N, min_new_tokens=N, num_beams=4,
                                 do_sample=False, early_stopping=False, use_cache=True,
                                 pad_token_id=0)
            assert out.shape == (B, P + N), out.shape
            done.append(dict(batch=B, prompt=P, new_tokens=N))
    return dict(requests=done, beams=4, config=cfg, dtype="bfloat16",
                params=sum(p.numel() for p in model.parameters()))


def wl_recsys_train(dev, smoke):
    """DLRM-shaped recommender: 8 embedding tables (EmbeddingBag, sum pooling, sparse
    gradients) of 2 000 000 x 64 fp32 each (4 GB resident), a bottom MLP over 13 dense
    features (512-256-64), pairwise dot-product interactions, a top MLP (512-256-1), binary
    cross-entropy. SGD (lr 0.01) on the tables' sparse gradients, Adam on the MLPs. 40 steps,
    each of a random batch (2 048-32 768) with a random number of ids per bag (1-32) per
    table."""
    torch = _torch()
    nn = torch.nn
    T, rows, D = (8, 1000, 8) if smoke else (8, 2_000_000, 64)
    steps, batches, bag = (2, (16, 32), (1, 4)) if smoke else (40, (2048, 32768), (1, 32))
    torch.manual_seed(0)
    tables = nn.ModuleList([nn.EmbeddingBag(rows, D, mode="sum", sparse=True)
                            for _ in range(T)]).to(dev)
    bottom = nn.Sequential(nn.Linear(13, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                           nn.Linear(256, D), nn.ReLU()).to(dev)
    pairs = (T + 1) * T // 2
    top = nn.Sequential(nn.Linear(D + pairs, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                        nn.Linear(256, 1)).to(dev)
    sparse_opt = torch.optim.SGD(tables.parameters(), lr=0.01)
    dense_opt = torch.optim.Adam(list(bottom.parameters()) + list(top.parameters()), lr=1e-3)
    iu = torch.triu_indices(T + 1, T + 1, offset=1, device=dev)
    rng = random.Random(0)
    g = torch.Generator(device=dev).manual_seed(0)
    used = []
    for _ in range(steps):
        B = rng.randint(*batches)
        used.append(B)
        dense = torch.randn(B, 13, device=dev, generator=g)
        y = torch.randint(0, 2, (B,), device=dev, generator=g).float()
        embs = []
        for t in tables:
            lens = torch.randint(bag[0], bag[1] + 1, (B,), device=dev, generator=g)
            offsets = torch.cumsum(lens, 0) - lens
            ids = torch.randint(0, rows, (int(lens.sum()),), device=dev, generator=g)
            embs.append(t(ids, offsets))
        x = bottom(dense)
        z = torch.stack([x] + embs, dim=1)  # B x (T+1) x D
        inter = torch.bmm(z, z.transpose(1, 2))[:, iu[0], iu[1]]
        logit = top(torch.cat([x, inter], dim=1)).squeeze(1)
        loss = nn.functional.binary_cross_entropy_with_logits(logit, y)
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
        sparse_opt.zero_grad(set_to_none=True)
        dense_opt.zero_grad(set_to_none=True)
    float(loss)
    return dict(steps=steps, batches=used, tables=T, rows=rows, dim=D, bag=list(bag),
                dtype="float32", optimizer="SGD (sparse tables) + Adam (MLPs)",
                params=sum(p.numel() for m in (tables, bottom, top) for p in m.parameters()))


def wl_vae_decode(dev, smoke):
    """A Stable-Diffusion-shaped VAE decoder (written here, random weights: conv_in 4 -> 512,
    a middle block of two ResNet blocks around one self-attention at latent resolution, up
    blocks of 512, 512, 256, 128 channels with three ResNet blocks each and a nearest x2
    upsample + conv after the first three, GroupNorm(32) + SiLU, conv_out to 3), fp16,
    inference: 16 decodes in turn, each of a random batch (1-4) of latents of a random side
    (32-128, i.e. 256-1024 px images, not square: each side drawn alone)."""
    torch = _torch()
    nn = torch.nn
    F = torch.nn.functional

    class Res(nn.Module):
        def __init__(self, i, o):
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(32, i), nn.Conv2d(i, o, 3, padding=1)
            self.n2, self.c2 = nn.GroupNorm(32, o), nn.Conv2d(o, o, 3, padding=1)
            self.skip = nn.Conv2d(i, o, 1) if i != o else nn.Identity()

        def forward(self, x):
            h = self.c1(F.silu(self.n1(x)))
            return self.skip(x) + self.c2(F.silu(self.n2(h)))

    class Attn(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.n, self.qkv, self.out = nn.GroupNorm(32, c), nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

        def forward(self, x):
            B, C, H, W = x.shape
            q, k, v = self.qkv(self.n(x)).reshape(B, 3, 1, C, H * W).transpose(-1, -2).unbind(1)
            h = F.scaled_dot_product_attention(q, k, v)
            return x + self.out(h.transpose(-1, -2).reshape(B, C, H, W))

    ch = (64, 64, 32, 32) if smoke else (512, 512, 256, 128)
    layers = [nn.Conv2d(4, ch[0], 3, padding=1), Res(ch[0], ch[0]), Attn(ch[0]), Res(ch[0], ch[0])]
    prev = ch[0]
    for i, c in enumerate(ch):
        for _ in range(3):
            layers.append(Res(prev, c))
            prev = c
        if i < len(ch) - 1:
            layers += [nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(c, c, 3, padding=1)]
    layers += [nn.GroupNorm(32, prev), nn.SiLU(), nn.Conv2d(prev, 3, 3, padding=1)]
    torch.manual_seed(0)
    model = nn.Sequential(*layers).to(dev, torch.float16).eval()
    decodes, batches, sides = (2, (1, 2), (4, 8)) if smoke else (16, (1, 4), (32, 128))
    rng = random.Random(0)
    g = torch.Generator(device=dev).manual_seed(0)
    shapes = []
    with torch.inference_mode():
        for _ in range(decodes):
            B, H, W = rng.randint(*batches), rng.randint(*sides), rng.randint(*sides)
            shapes.append([B, H, W])
            z = torch.randn(B, 4, H, W, device=dev, generator=g, dtype=torch.float16)
            img = model(z)
            assert img.shape == (B, 3, 8 * H, 8 * W), img.shape
            float(img.float().mean())
    return dict(decodes=shapes, channels=list(ch), dtype="float16",
                params=sum(p.numel() for p in model.parameters()))


# Extra environment for a workload's process. The two small loops run with small cuBLAS /
# cuBLASLt workspaces (4 MiB each; PyTorch's default on an H200 is 32 MiB each, allocated
# through the caching allocator at the first matmul and kept to the end), so that the
# trace is the loop's own memory rather than two fixed 32 MiB blocks.
WORKLOAD_ENV = {
    "small_loop": {"CUBLAS_WORKSPACE_CONFIG": ":4096:1", "CUBLASLT_WORKSPACE_SIZE": "4096"},
    "small_mlp": {"CUBLAS_WORKSPACE_CONFIG": ":4096:1", "CUBLASLT_WORKSPACE_SIZE": "4096"},
    "tiny_gpt": {"CUBLAS_WORKSPACE_CONFIG": ":4096:1", "CUBLASLT_WORKSPACE_SIZE": "4096"},
}

WORKLOADS = {
    "llm_decode": wl_llm_decode,
    "varlen_batches": wl_varlen_batches,
    "model_swap": wl_model_swap,
    "unet_diffusion": wl_unet_diffusion,
    "vit_finetune": wl_vit_finetune,
    "bert_finetune": wl_bert_finetune,
    "mixed_precision": wl_mixed_precision,
    "checkpointing": wl_checkpointing,
    "small_loop": wl_small_loop,
    "small_mlp": wl_small_mlp,
    "detection": wl_detection,
    "lstm_train": wl_lstm_train,
    "t5_seq2seq": wl_t5_seq2seq,
    "gan_train": wl_gan_train,
    "serve_varbatch": wl_serve_varbatch,
    "segment_train": wl_segment_train,
    "moe_train": wl_moe_train,
    "tiny_gpt": wl_tiny_gpt,
    "lora_finetune": wl_lora_finetune,
    "video_train": wl_video_train,
    "gnn_train": wl_gnn_train,
    "beam_search": wl_beam_search,
    "recsys_train": wl_recsys_train,
    "vae_decode": wl_vae_decode,
}

# The held-out set: recorded after vrampool's default policy constants were chosen on the
# other traces, and not used to choose them. Their files go to <out>/heldout/, which
# tests/tests/figures.rs and the `data/traces/*.csv.gz` commands do not read; their
# entries in <out>/recording.json have "held_out": true.
# The second three (segment_train, moe_train, tiny_gpt) were added on 2026-12-01, after
# every tuning decision up to then, on workloads whose shapes the first eighteen lack.
# The third three (lora_finetune, video_train, gnn_train) on 2026-12-04, after every
# tuning decision up to then (the default policy of 143164c), likewise.
# The fourth three (beam_search, recsys_train, vae_decode) on 2026-12-06, likewise: beam-search
# decoding (a KV cache reordered at every token), a recommender with 4 GB of embedding tables
# and sparse gradients of random size, and image decoding at random resolutions.
HELD_OUT = ("t5_seq2seq", "gan_train", "serve_varbatch", "segment_train", "moe_train", "tiny_gpt",
            "lora_finetune", "video_train", "gnn_train", "beam_search", "recsys_train",
            "vae_decode")


def trace_path(out_dir, name):
    if name in HELD_OUT:
        return os.path.join(out_dir, "heldout", f"{name}.csv.gz")
    return os.path.join(out_dir, f"{name}.csv.gz")

# ----------------------------------------------------------------------------------------
# conversion and validation
# ----------------------------------------------------------------------------------------


def convert(trace, t_start):
    """Turn allocator trace entries into RMM rows; validate. Returns (rows, stats)."""
    rows = []
    live = {}
    cur = peak = 0
    n_alloc = n_free = zero = largest = 0
    ignored = {}
    have_time = bool(trace) and "time_us" in trace[0]
    for e in trace:
        a = e["action"]
        if a == "oom":
            raise RuntimeError(f"the trace holds an OOM: {e}")
        if a not in ("alloc", "free_completed"):
            ignored[a] = ignored.get(a, 0) + 1
            continue
        addr, size = int(e["addr"]), int(e["size"])
        t = e["time_us"] / 1e6 if have_time else None
        if a == "alloc":
            if size == 0:
                zero += 1
                continue
            if addr in live:
                raise RuntimeError(f"pointer {addr:#x} allocated again while live")
            live[addr] = size
            cur += size
            peak = max(peak, cur)
            largest = max(largest, size)
            n_alloc += 1
            rows.append((t, "allocate", addr, size))
        else:
            if addr not in live:
                raise RuntimeError(f"free_completed of pointer {addr:#x}, which is not live "
                                   "(allocated before recording started, or dropped)")
            size = live.pop(addr)
            cur -= size
            n_free += 1
            rows.append((t, "free", addr, size))
    if not rows:
        raise RuntimeError("no allocation recorded")
    # Time: the trace's time_us are microseconds since the epoch in PyTorch 2.x; if they do
    # not look like it, shift them so the first event sits at the recording's start.
    shift = 0.0
    if not have_time:
        rows = [(t_start, *r[1:]) for r in rows]
    elif abs(rows[0][0] - t_start) > 3600:
        shift = t_start - rows[0][0]
        rows = [(r[0] + shift, *r[1:]) for r in rows]
    stats = dict(allocations=n_alloc, frees=n_free, live_at_end=len(live),
                 live_bytes_at_end=cur, peak_live=peak, largest=largest, zero_size_skipped=zero,
                 ignored_actions=ignored, trace_entries=len(trace), time_shift_s=shift,
                 first_event_after_start_s=rows[0][0] - t_start,
                 duration_s=rows[-1][0] - rows[0][0])
    return rows, stats


def write_csv_gz(path, rows):
    tmp = path + ".tmp"
    with gzip.open(tmp, "wt", compresslevel=9, newline="") as f:
        f.write("Thread,Time,Action,Pointer,Size,Stream\n")
        for t, act, addr, size in rows:
            f.write(f"0,{t:.6f},{act},0x{addr:x},{size},0x0\n")
    os.replace(tmp, path)


def validate_file(path):
    """Re-read the written file the way vrampool's reader does."""
    live = {}
    cur = peak = n = 0
    with gzip.open(path, "rt") as f:
        assert f.readline().strip() == "Thread,Time,Action,Pointer,Size,Stream"
        for ln, line in enumerate(f, 2):
            th, t, act, p, s, st = line.rstrip("\n").split(",")
            p, s = int(p, 16), int(s)
            if act == "allocate":
                assert s > 0, ln
                assert p not in live, f"line {ln}: {p:#x} allocated again while live"
                live[p] = s
                cur += s
                n += 1
                peak = max(peak, cur)
            else:
                assert act == "free", ln
                assert p in live, f"line {ln}: free of {p:#x}, not live"
                cur -= live.pop(p)
    return n, peak


# ----------------------------------------------------------------------------------------
# one workload, in this process
# ----------------------------------------------------------------------------------------


def run_one(name, out_dir, threads):
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    torch.cuda.init()
    # Probe: does recording with context=None (no stack traces, cheapest) give a trace?
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=MAX_ENTRIES)
    probe = torch.empty(1024, device=dev)
    del probe
    snap = torch.cuda.memory._snapshot()
    ok = any(e["action"] == "alloc" for e in snap["device_traces"][0])
    torch.cuda.memory._record_memory_history(enabled=None)
    torch.cuda.empty_cache()
    context = None if ok else "alloc"
    if not ok:
        print(f"[{name}] context=None gave no trace; recording with context='alloc'", flush=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.memory_reserved() == 0, torch.cuda.memory_reserved()

    t_start = time.time()
    torch.cuda.memory._record_memory_history(enabled="all", context=context, stacks="python",
                                             max_entries=MAX_ENTRIES, clear_history=True)
    w0 = time.perf_counter()
    facts = WORKLOADS[name](dev, False)
    gc.collect()
    torch.cuda.synchronize()
    wall = time.perf_counter() - w0
    snap = torch.cuda.memory._snapshot()
    max_reserved = torch.cuda.max_memory_reserved()
    max_allocated = torch.cuda.max_memory_allocated()
    stats = torch.cuda.memory_stats()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap["device_traces"][0]
    if len(trace) >= MAX_ENTRIES:
        raise RuntimeError("the ring buffer is full: events may have been dropped")
    rows, st = convert(trace, t_start)
    del snap, trace
    if st["first_event_after_start_s"] < -0.5:
        raise RuntimeError(f"first event {st['first_event_after_start_s']:.3f} s before start")
    path = trace_path(out_dir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_csv_gz(path, rows)
    n, peak = validate_file(path)
    assert n == st["allocations"] and peak == st["peak_live"]
    res = dict(
        name=name, doc=" ".join(WORKLOADS[name].__doc__.split()), facts=facts,
        torch=torch.__version__, device=torch.cuda.get_device_name(0),
        total_memory=torch.cuda.get_device_properties(0).total_memory,
        context=context, wall_s=round(wall, 2),
        max_memory_reserved=max_reserved, max_memory_allocated=max_allocated,
        num_device_alloc=stats.get("num_device_alloc"), num_alloc_retries=stats.get("num_alloc_retries"),
        real_run_ratio=max_reserved / st["peak_live"],
        file=os.path.relpath(path, out_dir), file_bytes=os.path.getsize(path), **st,
    )
    if name in HELD_OUT:
        res["held_out"] = True
    return res


def smoke(names):
    import torch

    torch.set_num_threads(2)
    for n in names:
        t = time.perf_counter()
        facts = WORKLOADS[n](torch.device("cpu"), True)
        print(f"smoke {n}: ok in {time.perf_counter() - t:.1f}s {json.dumps(facts, default=str)[:200]}",
              flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--out", default=os.path.join(REPO, "data", "traces"))
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=180)
    ap.add_argument("--one", help="(internal) run one workload in this process")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny sizes, no recording")
    args = ap.parse_args()
    names = args.names or list(WORKLOADS)
    for n in names:
        if n not in WORKLOADS:
            sys.exit(f"unknown workload {n}; known: {', '.join(WORKLOADS)}")
    if args.smoke:
        return smoke(names)
    os.makedirs(args.out, exist_ok=True)
    if args.one:
        res = run_one(args.one, args.out, args.threads)
        print("RESULT " + json.dumps(res), flush=True)
        return

    meta_path = os.path.join(args.out, "recording.json")
    meta = {}
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
    lock = threading.Lock()

    def job(n):
        t = time.perf_counter()
        cmd = [sys.executable, os.path.abspath(__file__), "--one", n, "--out", args.out,
               "--threads", str(args.threads)]
        env = dict(os.environ, **WORKLOAD_ENV.get(n, {}))
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        except subprocess.TimeoutExpired:
            print(f"[{n}] TIMEOUT after {args.timeout}s", flush=True)
            return
        res = None
        for line in p.stdout.splitlines():
            if line.startswith("RESULT "):
                res = json.loads(line[7:])
        dt = time.perf_counter() - t
        if p.returncode != 0 or res is None:
            print(f"[{n}] FAILED rc={p.returncode} after {dt:.0f}s\n{p.stdout[-1500:]}\n{p.stderr[-3000:]}",
                  flush=True)
            return
        res["command"] = "python3 scripts/traces/record.py " + n
        res["env"] = WORKLOAD_ENV.get(n, {})
        with lock:
            meta[n] = res
            with open(meta_path, "w") as f:
                json.dump(meta, f, indent=1, sort_keys=True)
        print(f"[{n}] ok in {dt:.0f}s (workload {res['wall_s']}s): {res['allocations']} allocations, "
              f"peak live {res['peak_live']:,} B, max reserved {res['max_memory_reserved']:,} B, "
              f"real run {res['real_run_ratio']:.3f}, {res['file_bytes']:,} B gz, "
              f"live at end {res['live_at_end']}, first event +{res['first_event_after_start_s']:.3f}s",
              flush=True)

    with ThreadPoolExecutor(args.jobs) as ex:
        list(ex.map(job, names))


if __name__ == "__main__":
    main()
