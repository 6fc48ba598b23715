#!/usr/bin/env python3
"""DeepSeek-V4-Flash decode attention: Peregrine's CUDA kernels against PyTorch, one process.

Loads libperegrine_attention_bench.so with ctypes, builds the inputs as PyTorch CUDA tensors,
calls both implementations on the same tensors and stream, times each with CUDA events
(median of >= 20 runs after warm-up, L2 flushed before every timed run) and writes one JSON
line per (op, batch, context) with the bytes and FLOPs counted from the shapes, achieved
TB/s and TFLOP/s, the fraction of the H200 roofline and the ratio PyTorch time / ours.

Ops: sparse attention over window + top-512 compressed rows (CSA layers), over window + all
ratio-128 entries (HCA layers), lightning-indexer scores, top-512 selection, scores + top-k,
the grouped output projection; and the indexer's independence from the configured maximum
context (4K actual context, maximum 8K vs 1M).

Usage: bench_attention.py --lib build-h200/gpu-bin/libperegrine_attention_bench.so --out FILE
       bench_attention.py --self-check   (CPU only: the PyTorch references against plain loops)
"""

import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

import torch

COPY_BYTES_PER_S = 4.3e12   # measured device-to-device copy on the H200 (read + write)
BF16_FLOPS_PER_S = 790e12   # measured 8192^3 bf16 matmul on the H200

# DeepSeek-V4-Flash attention shapes.
HEADS, HEAD_DIM, ROPE_DIM, WINDOW = 64, 512, 64, 128
INDEX_HEADS, INDEX_DIM, TOPK = 64, 128, 512
GROUPS, O_RANK, HIDDEN = 8, 1024, 4096
PAGE = 64       # indexer key pages and CSA entry pages: 64 entries (256 tokens)
HCA_PAGE = 2    # HCA entry pages: 2 entries (the same 256-token block)
PAGES = "random"  # page placement: "random" (a fragmented pool) or "contiguous" (each request's run)
BATCHES = (1, 16, 64, 128)
CONTEXTS = (4096, 32768, 131072, 1048576)
POOL_ROWS = 1 << 21  # shared compressed-KV pool (2 GiB of bf16 rows), far larger than L2


# --------------------------------------------------------------------------- the library

class Peregrine:
    def __init__(self, path, device=0):
        lib = ctypes.CDLL(path)
        P, I, I64, F, U64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float, ctypes.c_uint64
        lib.pg_bench_create.argtypes = [I]
        lib.pg_bench_create.restype = P
        lib.pg_bench_destroy.argtypes = [P]
        lib.pg_bench_error.argtypes = [P]
        lib.pg_bench_error.restype = ctypes.c_char_p
        lib.pg_bench_num_sms.argtypes = [P]
        lib.pg_bench_num_sms.restype = I
        lib.pg_attention_layout.argtypes = [I, I, ctypes.POINTER(I), ctypes.POINTER(I)]
        lib.pg_attention_plan.argtypes = [P, P, I, I, I, P]
        lib.pg_attention_plan.restype = I
        lib.pg_sparse_attention.argtypes = [P, P, I, I, I, P, I64, P, I, P, P, I64, I, P, I, P, I, P, P, P, P, P,
                                            I, I, F, P, I, I, P, P, P, I, U64]
        lib.pg_sparse_attention.restype = I
        lib.pg_indexer_scores.argtypes = [P, P, I, I, I, P, P, I64, I, P, I, P, P, I, F, I, U64]
        lib.pg_indexer_scores.restype = I
        lib.pg_indexer_topk.argtypes = [P, P, I, I, P, P, I, P, P, P, U64]
        lib.pg_indexer_topk.restype = I
        lib.pg_indexer_topk_workspace_ints.argtypes = []
        lib.pg_indexer_topk_workspace_ints.restype = I
        lib.pg_indexer_topk_phases.argtypes = []
        lib.pg_indexer_topk_phases.restype = I
        lib.pg_indexer_topk_grid.argtypes = [P, I, I]
        lib.pg_indexer_topk_grid.restype = I
        lib.pg_output_projection.argtypes = [P, P, I, I, I, P, I, I, P, I, P, P, U64]
        lib.pg_output_projection.restype = I
        self.lib = lib
        self.h = lib.pg_bench_create(device)
        if not self.h:
            raise RuntimeError("pg_bench_create failed (see stderr)")
        self.num_sms = lib.pg_bench_num_sms(self.h)

    def check(self, rc):
        if rc != 0:
            raise RuntimeError(self.lib.pg_bench_error(self.h).decode())

    def layout(self, num_ctas, max_batch):
        n, s = ctypes.c_int(), ctypes.c_int()
        self.lib.pg_attention_layout(num_ctas, max_batch, ctypes.byref(n), ctypes.byref(s))
        return n.value, s.value

    def plan(self, rows, num_ctas, max_batch):
        num_ints, _ = self.layout(num_ctas, max_batch)
        rows64 = torch.tensor(rows, dtype=torch.int64)
        out = torch.zeros(num_ints, dtype=torch.int32)
        self.check(self.lib.pg_attention_plan(self.h, rows64.data_ptr(), len(rows), num_ctas, max_batch,
                                              out.data_ptr()))
        return out


def ptr(t):
    return None if t is None else t.data_ptr()


def stream():
    return torch.cuda.current_stream().cuda_stream


# --------------------------------------------------------------------------- PyTorch references

def inverse_rope(o, pos, cos, sin):
    """Inverse interleaved RoPE on the trailing ROPE_DIM dims of o [B, H, D] (fp32, in place)."""
    b, h, d = o.shape
    c = cos[pos.long()][:, None, :]
    s = sin[pos.long()][:, None, :]
    x = o[..., d - ROPE_DIM:].reshape(b, h, ROPE_DIM // 2, 2)
    x0, x1 = x[..., 0], x[..., 1]
    o[..., d - ROPE_DIM:] = torch.stack([x0 * c + x1 * s, x1 * c - x0 * s], -1).reshape(b, h, ROPE_DIM)
    return o


def torch_attention(q, window_kv, widx, wlen, ckv_rows, page_table, cidx, clen, dense_len, sink, pos, cos, sin, page,
                    scale, exact=False):
    """Gather the window and compressed rows, softmax with the sink, inverse RoPE. With exact=True the
    matmuls run in fp32 (the accuracy reference); otherwise in bf16 as one would write it in PyTorch."""
    b, h, d = q.shape
    kw = window_kv[widx.clamp(min=0).long()]
    mask_w = (torch.arange(widx.shape[1], device=q.device)[None] < wlen[:, None]) & (widx >= 0)
    if cidx is None:
        e = torch.arange(dense_len, device=q.device)[None].expand(b, -1)
        mask_c = e < clen[:, None]
    else:
        e = cidx
        mask_c = (torch.arange(cidx.shape[1], device=q.device)[None] < clen[:, None]) & (cidx >= 0)
    e = e.clamp(min=0).long()
    pages = page_table.long().gather(1, (e // page).clamp(max=page_table.shape[1] - 1))
    kc = ckv_rows[pages * page + e % page]
    kv = torch.cat([kw, kc], 1)
    mask = torch.cat([mask_w, mask_c], 1)
    if exact:
        s = torch.matmul(q.float(), kv.float().transpose(1, 2)) * scale
    else:
        s = torch.matmul(q, kv.transpose(1, 2)).float() * scale
    s = s.masked_fill(~mask[:, None, :], float("-inf"))
    s = torch.cat([s, sink.view(1, h, 1).expand(b, h, 1)], -1)
    p = torch.softmax(s, -1)[..., :-1]
    o = torch.matmul(p, kv.float()) if exact else torch.matmul(p.to(kv.dtype), kv).float()
    return inverse_rope(o, pos, cos, sin).to(torch.bfloat16)


def torch_indexer_scores(q, w, key_rows, page_table, n, max_entries, scale, exact=False, chunk_bytes=3 << 30):
    """scores [B, max_entries] (-inf past each request's length), requests in chunks to bound memory."""
    b = q.shape[0]
    out = torch.empty(b, max_entries, dtype=torch.float32, device=q.device)
    e = torch.arange(max_entries, device=q.device)
    per_request = max_entries * (INDEX_DIM * 2 + INDEX_HEADS * 4 * 2)
    step = max(1, min(b, chunk_bytes // max(per_request, 1)))
    for b0 in range(0, b, step):
        b1 = min(b, b0 + step)
        pages = page_table[b0:b1].long().gather(1, (e // PAGE)[None].expand(b1 - b0, -1))
        kk = key_rows[pages * PAGE + e % PAGE]
        if exact:
            logits = torch.matmul(q[b0:b1].float(), kk.float().transpose(1, 2))
        else:
            logits = torch.matmul(q[b0:b1], kk.transpose(1, 2)).float()
        sc = (logits.relu_() * w[b0:b1, :, None]).sum(1) * scale
        out[b0:b1] = sc.masked_fill(e[None] >= n[b0:b1, None], float("-inf"))
    return out


def torch_topk(scores, n, k):
    top = torch.topk(scores, k, dim=-1, sorted=False).indices
    return top, torch.clamp(n, max=k)


# --------------------------------------------------------------------------- timing

class Timer:
    def __init__(self, iters, warmup):
        self.iters, self.warmup = iters, warmup
        self.flush_buf = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def median_us(self, fn):
        for _ in range(self.warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        for i in range(self.iters):
            self.flush_buf.zero_()  # evict the previous run's data from L2
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


def row(op, batch, context, ours_us, torch_us, nbytes, flops, **extra):
    t = ours_us * 1e-6
    tb_s = nbytes / t / 1e12
    tflop_s = flops / t / 1e12
    floor = max(nbytes / COPY_BYTES_PER_S, flops / BF16_FLOPS_PER_S)
    r = {"op": op, "batch": batch, "context": context, "ours_us": round(ours_us, 2),
         "torch_us": None if torch_us is None else round(torch_us, 2),
         "speedup_vs_torch": None if torch_us is None else round(torch_us / ours_us, 2),
         "bytes": int(nbytes), "flops": int(flops), "tb_s": round(tb_s, 3), "tflop_s": round(tflop_s, 2),
         "roofline_fraction": round(floor / t, 3), "bound": "memory" if nbytes / COPY_BYTES_PER_S >= flops /
                                                                         BF16_FLOPS_PER_S else "compute"}
    r.update(extra)
    return r


def rope_tables(num_positions, device):
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, ROPE_DIM, 2, dtype=torch.float64, device=device) / ROPE_DIM))
    ang = torch.arange(num_positions, dtype=torch.float64, device=device)[:, None] * inv_freq[None]
    return torch.cos(ang).float().contiguous(), torch.sin(ang).float().contiguous()


# --------------------------------------------------------------------------- workloads

class Workload:
    """Inputs for `batch` requests at context `context` (all at position context - 1)."""

    def __init__(self, batch, context, device, cos, sin, gen):
        self.batch, self.context = batch, context
        bf16 = torch.bfloat16
        self.pos = torch.full((batch,), context - 1, dtype=torch.int32, device=device)
        self.q = torch.randn(batch, HEADS, HEAD_DIM, device=device, generator=gen, dtype=bf16)
        self.window_kv = torch.randn(batch * WINDOW, HEAD_DIM, device=device, generator=gen, dtype=bf16)
        p = torch.arange(context - WINDOW, context, device=device) % WINDOW
        self.widx = (torch.arange(batch, device=device)[:, None] * WINDOW + p[None]).int().contiguous()
        self.wlen = torch.full((batch,), min(context, WINDOW), dtype=torch.int32, device=device)
        self.sink = torch.randn(HEADS, device=device, generator=gen)
        self.cos, self.sin = cos, sin
        # Compressed pools shared by the requests; page tables pick random pages (a fragmented
        # pool) or give each request one contiguous run (PAGES).
        self.csa_visible = context // 4
        self.hca_visible = context // 128
        self.pool = torch.randn(POOL_ROWS, HEAD_DIM, device=device, generator=gen, dtype=bf16)
        self.csa_pages = -(-self.csa_visible // PAGE)
        self.hca_pages = max(1, -(-self.hca_visible // HCA_PAGE))

        def table(pages, page):
            pool_pages = POOL_ROWS // page
            if PAGES == "contiguous":
                run = torch.arange(batch, device=device)[:, None] * pages + torch.arange(pages, device=device)[None]
                return (run % pool_pages).int().contiguous()
            return torch.randint(0, pool_pages, (batch, pages), device=device, generator=gen, dtype=torch.int32)

        self.csa_table = table(self.csa_pages, PAGE)
        self.hca_table = table(self.hca_pages, HCA_PAGE)
        self.count = min(TOPK, self.csa_visible)
        self.cidx = torch.full((batch, TOPK), -1, dtype=torch.int32, device=device)
        pick = torch.rand(batch, self.csa_visible, device=device, generator=gen).topk(self.count, -1).indices
        self.cidx[:, :self.count] = pick.sort(-1).values.int()
        self.clen = torch.full((batch,), self.count, dtype=torch.int32, device=device)
        self.hlen = torch.full((batch,), self.hca_visible, dtype=torch.int32, device=device)


def fp8_rows(pool):
    """V4's FP8 rows (kernels/common/kv_fp8_row.h) of bf16 rows [R, 512] and the bf16 rows they
    dequantise to: 448 e4m3 values in blocks of 64 under power-of-two scales, 64 bf16 rope
    values, the 7 scale codes, each part 16-byte aligned; 592 bytes a row (nope a multiple of 64)."""
    r = pool.shape[0]
    nope = HEAD_DIM - ROPE_DIM
    x = pool[:, :nope].float().view(r, nope // 64, 64)
    exponent = torch.ceil(torch.log2(x.abs().amax(-1).clamp(min=1e-4) / 448.0))
    scale = torch.exp2(exponent)
    q = (x / scale[..., None]).to(torch.float8_e4m3fn)
    def align16(n):
        return -(-n // 16) * 16
    rope_at, scales_at = align16(nope), align16(nope) + align16(2 * ROPE_DIM)
    rows = torch.zeros(r, scales_at + align16(nope // 64), dtype=torch.uint8, device=pool.device)
    rows[:, :nope] = q.view(torch.uint8).view(r, nope)
    rows[:, rope_at:rope_at + 2 * ROPE_DIM] = pool[:, nope:].contiguous().view(torch.uint8)
    rows[:, scales_at:scales_at + nope // 64] = (exponent + 127).to(torch.uint8)
    values = torch.cat([(q.float() * scale[..., None]).view(r, nope), pool[:, nope:].float()], 1).to(torch.bfloat16)
    return rows.contiguous(), values.contiguous()


def run_attention(pg, timer, w, kind, out_rows, check_requests=4, fp8=False):
    """`fp8`: the compressed entries as FP8 rows (--kv-cache-dtype fp8); PyTorch reads their
    bf16 values."""
    b = w.batch
    pool, entry_bytes = w.pool, HEAD_DIM * 2
    if fp8:
        pool_fp8, pool = fp8_rows(w.pool)
        entry_bytes = pool_fp8.shape[1]
    if kind == "csa":
        table, cidx, clen, pages, n_c, dense, page = w.csa_table, w.cidx, w.clen, w.csa_pages, w.count, 0, PAGE
    else:
        table, cidx, clen, pages, n_c, dense, page = (w.hca_table, None, w.hlen, w.hca_pages, w.hca_visible,
                                                      w.hca_visible, HCA_PAGE)
    rows = [int(w.wlen[0]) + n_c] * b
    num_ctas = pg.num_sms
    num_ints, max_seg = pg.layout(num_ctas, b)
    t0 = time.perf_counter()
    sched_host = pg.plan(rows, num_ctas, b)
    plan_us = (time.perf_counter() - t0) * 1e6
    sched = sched_host.cuda()
    part_o = torch.empty(max_seg, HEADS, HEAD_DIM, dtype=torch.float32, device="cuda")
    part_lse = torch.empty(max_seg, HEADS, dtype=torch.float32, device="cuda")
    out = torch.full((b, HEADS, HEAD_DIM), float("nan"), dtype=torch.bfloat16, device="cuda")
    scale = 1.0 / math.sqrt(HEAD_DIM)
    pool_pages = POOL_ROWS // page
    capacity = TOPK if cidx is not None else 0

    def ours():
        pg.check(pg.lib.pg_sparse_attention(
            pg.h, ptr(w.q), b, HEADS, HEAD_DIM, ptr(w.window_kv), w.window_kv.shape[0], ptr(w.widx), WINDOW,
            ptr(w.wlen), ptr(pool_fp8 if fp8 else pool), pool_pages, page, ptr(table), pages, ptr(cidx), capacity,
            ptr(clen), ptr(w.sink), ptr(w.pos), ptr(w.cos), ptr(w.sin), w.cos.shape[0], ROPE_DIM, scale, ptr(sched),
            num_ctas, b, ptr(part_o), ptr(part_lse), ptr(out), ROPE_DIM if fp8 else 0, stream()))

    def ref():
        return torch_attention(w.q, w.window_kv, w.widx, w.wlen, pool, table, cidx, clen, dense, w.sink, w.pos,
                               w.cos, w.sin, page, scale)

    ours()
    torch.cuda.synchronize()
    c = min(b, check_requests)
    exact = torch_attention(w.q[:c], w.window_kv, w.widx[:c], w.wlen[:c], pool, table[:c],
                            None if cidx is None else cidx[:c], clen[:c], dense, w.sink, w.pos[:c], w.cos, w.sin,
                            page, scale, exact=True).float()
    err_ours = ((out[:c].float() - exact).abs().max() / exact.abs().max()).item()
    err_torch = ((ref()[:c].float() - exact).abs().max() / exact.abs().max()).item()
    ours_us = timer.median_us(ours)
    torch_us = timer.median_us(ref)
    n = WINDOW + n_c if w.context >= WINDOW else w.context + n_c
    n_window = n - n_c
    nbytes = b * (n_window * HEAD_DIM * 2 + n_c * entry_bytes + 2 * HEADS * HEAD_DIM * 2 + n * 4)
    flops = b * n * HEADS * HEAD_DIM * 4
    out_rows.append(row(f"attention_{kind}" + ("_fp8" if fp8 else ""), b, w.context, ours_us, torch_us, nbytes, flops,
                        kv_rows=n, entry_bytes=entry_bytes, pages=PAGES,
                        page_size=page,
                        max_rel_err_ours=round(err_ours, 5), max_rel_err_torch=round(err_torch, 5),
                        host_plan_us=round(plan_us, 1)))


class IndexerInputs:
    def __init__(self, batch, context, max_context, device, gen, topk_workspace_ints):
        self.batch = batch
        self.n = context // 4
        self.max_entries = max_context // 4
        self.stride = self.max_entries
        self.max_pages = -(-self.max_entries // PAGE)
        used_pages = -(-self.n // PAGE)
        self.num_pages = batch * used_pages  # every key read is distinct: no L2 reuse across requests
        self.keys = torch.randn(self.num_pages * PAGE, INDEX_DIM, device=device, generator=gen, dtype=torch.bfloat16)
        self.table = torch.zeros(batch, self.max_pages, dtype=torch.int32, device=device)
        order = (torch.arange(self.num_pages, device=device) if PAGES == "contiguous"
                 else torch.randperm(self.num_pages, device=device, generator=gen))
        self.table[:, :used_pages] = order.view(batch, used_pages).int()
        self.q = torch.randn(batch, INDEX_HEADS, INDEX_DIM, device=device, generator=gen, dtype=torch.bfloat16)
        self.w = torch.randn(batch, INDEX_HEADS, device=device, generator=gen) * (INDEX_HEADS ** -0.5)
        self.num = torch.full((batch,), self.n, dtype=torch.int32, device=device)
        self.scores = torch.full((batch, self.stride), float("nan"), device=device)
        self.idx = torch.empty(batch, TOPK, dtype=torch.int32, device=device)
        self.cnt = torch.empty(batch, dtype=torch.int32, device=device)
        # Zeroed once; every top-k call leaves its counters zero again.
        self.topk_ws = torch.zeros(batch, topk_workspace_ints, dtype=torch.int32, device=device)
        self.scale = INDEX_DIM ** -0.5


def indexer_calls(pg, x):
    def scores():
        pg.check(pg.lib.pg_indexer_scores(pg.h, ptr(x.q), x.batch, INDEX_HEADS, INDEX_DIM, ptr(x.w), ptr(x.keys),
                                          x.num_pages, PAGE, ptr(x.table), x.max_pages, ptr(x.num), ptr(x.scores),
                                          x.stride, x.scale, 4 * pg.num_sms, stream()))

    def topk(stamps=None):
        pg.check(pg.lib.pg_indexer_topk(pg.h, ptr(x.scores), x.batch, x.stride, ptr(x.num), ptr(x.idx), TOPK,
                                        ptr(x.cnt), ptr(x.topk_ws), None if stamps is None else ptr(stamps),
                                        stream()))

    def both():
        scores()
        topk()

    return scores, topk, both


# Stamp slots of kernels/indexer_topk.cuh's IndexerTopKPhase.
START_NS, START_CYC, ESTIMATED_CYC, GATHERED_CYC, LOADED_CYC, SELECTED_CYC, WRITTEN_CYC, END_NS, SAMPLED_CYC = range(9)


def topk_phases(pg, x, topk, reps=20):
    """Where the top-k's time goes: medians over `reps` calls of each phase (us) from the
    kernel's own stamps (SM cycles, converted with the global timer's rate in the same CTA)."""
    grid = pg.lib.pg_indexer_topk_grid(pg.h, x.batch, x.stride)
    calls = []
    for _ in range(reps):
        stamps = torch.zeros(grid, pg.lib.pg_indexer_topk_phases(), dtype=torch.int64, device="cuda")
        topk(stamps)
        torch.cuda.synchronize()
        calls.append(stamps.cpu())
    med = lambda v: statistics.median(v) if v else None
    out = {k: [] for k in ("span", "estimate", "sample", "gather", "load", "select", "write")}
    for st in calls:
        ran = st[:, START_NS] != 0
        out["span"].append((st[ran, END_NS].max() - st[ran, START_NS].min()).item() / 1e3)
        sel = st[:, WRITTEN_CYC] != 0
        rate = med(((st[sel, END_NS] - st[sel, START_NS]).double() /
                    (st[sel, WRITTEN_CYC] - st[sel, START_CYC]).double()).tolist())  # ns per cycle
        longs = st[:, ESTIMATED_CYC] != 0
        for name, a, b, rows in (("estimate", START_CYC, ESTIMATED_CYC, longs), ("sample", START_CYC, SAMPLED_CYC, longs),
                                 ("gather", ESTIMATED_CYC, GATHERED_CYC, longs),
                                 ("load", GATHERED_CYC, LOADED_CYC, sel & (st[:, LOADED_CYC] != 0)),
                                 ("select", LOADED_CYC, SELECTED_CYC, sel & (st[:, LOADED_CYC] != 0)),
                                 ("write", SELECTED_CYC, WRITTEN_CYC, sel & (st[:, SELECTED_CYC] != 0))):
            if rows.any() and rate is not None:
                out[name].append(med(((st[rows, b] - st[rows, a]).double() * rate / 1e3).tolist()))
    return {f"phase_{k}_us": (None if med(v) is None else round(med(v), 2)) for k, v in out.items()}


def run_indexer(pg, timer, batch, context, gen, out_rows):
    x = IndexerInputs(batch, context, context, "cuda", gen, pg.lib.pg_indexer_topk_workspace_ints())
    scores, topk, both = indexer_calls(pg, x)
    both()
    torch.cuda.synchronize()
    ref_scores = torch_indexer_scores(x.q, x.w, x.keys, x.table, x.num, x.n, x.scale)
    c = min(batch, 4)
    exact = torch_indexer_scores(x.q[:c], x.w[:c], x.keys, x.table[:c], x.num[:c], x.n, x.scale, exact=True)
    denom = exact.abs().max().item()
    err_ours = ((x.scores[:c, :x.n] - exact).abs().max().item()) / denom
    err_torch = ((ref_scores[:c] - exact).abs().max().item()) / denom
    # The selection on our scores must be torch.topk's set (ties aside).
    ours_sets = x.idx.long().sort(-1).values
    ref_sets = torch.topk(x.scores[:, :x.n], min(TOPK, x.n), -1).indices.sort(-1).values
    mismatched = int((ours_sets[:, :ref_sets.shape[1]] != ref_sets).any(-1).sum().item())
    t_scores = timer.median_us(scores)
    t_topk = timer.median_us(topk)
    t_both = timer.median_us(both)
    t_ref_scores = timer.median_us(lambda: torch_indexer_scores(x.q, x.w, x.keys, x.table, x.num, x.n, x.scale))
    t_ref_topk = timer.median_us(lambda: torch_topk(x.scores[:, :x.n], x.num, min(TOPK, x.n)))
    n = x.n
    key_bytes = batch * n * INDEX_DIM * 2
    flops = batch * n * INDEX_HEADS * INDEX_DIM * 2
    out_rows.append(row("indexer_scores", batch, context, t_scores, t_ref_scores, key_bytes + batch * n * 4, flops,
                        entries=n, pages=PAGES, max_rel_err_ours=round(err_ours, 6), max_rel_err_torch=round(err_torch, 6)))
    out_rows.append(row("indexer_topk", batch, context, t_topk, t_ref_topk, batch * n * 4, 0, entries=n,
                        requests_with_other_set=mismatched, **topk_phases(pg, x, topk)))
    out_rows.append(row("indexer_total", batch, context, t_both, t_ref_scores + t_ref_topk,
                        key_bytes + 2 * batch * n * 4, flops, entries=n, pages=PAGES))
    del x


def run_indexer_max_context(pg, timer, gen, out_rows):
    for batch in BATCHES:
        times = {}
        for max_context in (8192, 1048576):
            x = IndexerInputs(batch, 4096, max_context, "cuda", gen, pg.lib.pg_indexer_topk_workspace_ints())
            _, _, both = indexer_calls(pg, x)
            times[max_context] = timer.median_us(both)
            del x
        ratio = times[1048576] / times[8192]
        out_rows.append({"op": "indexer_max_context_check", "batch": batch, "context": 4096,
                         "us_max_context_8k": round(times[8192], 2), "us_max_context_1m": round(times[1048576], 2),
                         "ratio_1m_over_8k": round(ratio, 3), "within_5_percent": abs(ratio - 1.0) <= 0.05})


def run_output_projection(pg, timer, batch, gen, out_rows):
    bf16 = torch.bfloat16
    o = torch.randn(batch, HEADS, HEAD_DIM, device="cuda", generator=gen).to(bf16)
    gi = HEADS * HEAD_DIM // GROUPS
    wa = (torch.randn(GROUPS, O_RANK, gi, device="cuda", generator=gen) * gi ** -0.5).to(bf16)
    wb = (torch.randn(HIDDEN, GROUPS * O_RANK, device="cuda", generator=gen) * (GROUPS * O_RANK) ** -0.5).to(bf16)
    mid = torch.empty(batch, GROUPS, O_RANK, dtype=bf16, device="cuda")
    out = torch.empty(batch, HIDDEN, dtype=bf16, device="cuda")

    def ours():
        pg.check(pg.lib.pg_output_projection(pg.h, ptr(o), batch, HEADS, HEAD_DIM, ptr(wa), GROUPS, O_RANK, ptr(wb),
                                             HIDDEN, ptr(mid), ptr(out), stream()))

    def ref():
        m = torch.einsum("bgi,gri->bgr", o.view(batch, GROUPS, gi), wa)
        return torch.matmul(m.reshape(batch, GROUPS * O_RANK), wb.t())

    ours()
    exact = torch.einsum("bgi,gri->bgr", o.view(batch, GROUPS, gi).float(), wa.float()).reshape(batch, -1) @ \
        wb.float().t()
    err = ((out.float() - exact).abs().max() / exact.abs().max()).item()
    t_ours = timer.median_us(ours)
    t_ref = timer.median_us(ref)
    nbytes = (GROUPS * O_RANK * gi + HIDDEN * GROUPS * O_RANK) * 2 + batch * (HEADS * HEAD_DIM + HIDDEN) * 2
    flops = 2 * batch * (GROUPS * O_RANK * gi + HIDDEN * GROUPS * O_RANK)
    out_rows.append(row("output_projection", batch, None, t_ours, t_ref, nbytes, flops,
                        max_rel_err_ours=round(err, 5)))


# --------------------------------------------------------------------------- CPU self-check

def self_check():
    """The PyTorch references against plain loops on tiny CPU problems."""
    global HEADS, HEAD_DIM, ROPE_DIM, WINDOW, PAGE
    HEADS, HEAD_DIM, ROPE_DIM, WINDOW, PAGE = 4, 16, 8, 4, 2
    torch.manual_seed(0)
    b, pool_rows, max_pages = 3, 40, 6
    q = torch.randn(b, HEADS, HEAD_DIM)
    window_kv = torch.randn(b * WINDOW, HEAD_DIM)
    widx = torch.tensor([[0, 1, 2, 3], [4, -1, 6, 7], [8, 9, 10, 11]], dtype=torch.int32)
    wlen = torch.tensor([4, 4, 2], dtype=torch.int32)
    pool = torch.randn(pool_rows, HEAD_DIM)
    table = torch.randint(0, pool_rows // PAGE, (b, max_pages), dtype=torch.int32)
    cidx = torch.tensor([[0, 3, 5, -1], [1, 2, -1, -1], [7, 8, 9, 10]], dtype=torch.int32)
    clen = torch.tensor([3, 2, 4], dtype=torch.int32)
    sink = torch.randn(HEADS)
    pos = torch.tensor([5, 0, 9], dtype=torch.int32)
    cos, sin = rope_tables(16, "cpu")
    scale = HEAD_DIM ** -0.5
    got = torch_attention(q.bfloat16(), window_kv.bfloat16(), widx, wlen, pool.bfloat16(), table, cidx, clen, 0, sink,
                          pos, cos, sin, PAGE, scale, exact=True).float()
    want = torch.zeros(b, HEADS, HEAD_DIM)
    qb, wb, pb = q.bfloat16().float(), window_kv.bfloat16().float(), pool.bfloat16().float()
    for r in range(b):
        rows = [wb[int(widx[r, j])] for j in range(int(wlen[r])) if int(widx[r, j]) >= 0]
        for j in range(int(clen[r])):
            e = int(cidx[r, j])
            if e >= 0:
                rows.append(pb[int(table[r, e // PAGE]) * PAGE + e % PAGE])
        for h in range(HEADS):
            logits = [float(qb[r, h] @ x) * scale for x in rows]
            m = max([float(sink[h])] + logits)
            den = math.exp(float(sink[h]) - m) + sum(math.exp(l - m) for l in logits)
            o = sum((math.exp(l - m) / den) * x for l, x in zip(logits, rows)) if rows else torch.zeros(HEAD_DIM)
            for i in range(ROPE_DIM // 2):
                d0 = HEAD_DIM - ROPE_DIM + 2 * i
                c, s = float(cos[int(pos[r]), i]), float(sin[int(pos[r]), i])
                x0, x1 = float(o[d0]), float(o[d0 + 1])
                o[d0], o[d0 + 1] = x0 * c + x1 * s, x1 * c - x0 * s
            want[r, h] = o
    err = (got - want).abs().max().item()
    print(f"attention reference vs loops: max abs error {err:.2e}")
    assert err < 2e-2, err
    # Indexer scores and top-k.
    global INDEX_HEADS, INDEX_DIM
    INDEX_HEADS, INDEX_DIM = 3, 8
    n = torch.tensor([5, 1, 7], dtype=torch.int32)
    keys = torch.randn(pool_rows, INDEX_DIM).bfloat16()
    iq = torch.randn(b, INDEX_HEADS, INDEX_DIM).bfloat16()
    w = torch.randn(b, INDEX_HEADS)
    sc = torch_indexer_scores(iq, w, keys, table, n, 8, INDEX_DIM ** -0.5, exact=True)
    for r in range(b):
        for e in range(8):
            if e >= int(n[r]):
                assert sc[r, e] == float("-inf")
                continue
            key = keys[int(table[r, e // PAGE]) * PAGE + e % PAGE].float()
            want_s = sum(float(w[r, h]) * max(float(iq[r, h].float() @ key), 0.0) for h in range(INDEX_HEADS))
            assert abs(want_s * INDEX_DIM ** -0.5 - float(sc[r, e])) < 1e-4
    print("indexer reference vs loops: ok")


# --------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build-h200/gpu-bin/libperegrine_attention_bench.so")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "gpu-out"), "bench_attention.jsonl"))
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--contexts", default=",".join(map(str, CONTEXTS)))
    ap.add_argument("--self-check", action="store_true")
    ap.add_argument("--pages", choices=("random", "contiguous"), default="random",
                    help="page placement: a fragmented pool, or one contiguous run per request")
    ap.add_argument("--skip-output-projection", action="store_true")
    ap.add_argument("--ops", default="csa,hca,indexer", help="which of csa, hca, indexer to run per shape")
    ap.add_argument("--fp8-entries", action="store_true",
                    help="also run each attention shape with FP8 entries (--kv-cache-dtype fp8)")
    args = ap.parse_args()
    if args.self_check:
        self_check()
        return 0
    assert args.iters >= 20, "report medians of at least 20 runs"
    global PAGES
    PAGES = args.pages
    batches = [int(v) for v in args.batches.split(",")]
    contexts = [int(v) for v in args.contexts.split(",")]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    torch.cuda.init()
    pg = Peregrine(os.path.abspath(args.lib), torch.cuda.current_device())
    timer = Timer(args.iters, args.warmup)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    cos, sin = rope_tables(max(contexts), "cuda")
    rows = []
    started = time.time()
    with open(args.out, "w") as f:
        def flush():
            for r in rows:
                r["device"] = torch.cuda.get_device_name()
                f.write(json.dumps(r) + "\n")
            f.flush()
            printed.extend(rows)
            rows.clear()

        printed = []
        for context in contexts:
            for batch in batches:
                for what in args.ops.split(","):
                    try:
                        if what == "indexer":
                            run_indexer(pg, timer, batch, context, gen, rows)
                        else:
                            w = Workload(batch, context, "cuda", cos, sin, gen)
                            run_attention(pg, timer, w, what, rows)
                            if args.fp8_entries:  # the same shape with FP8 entries, after the bf16 run
                                run_attention(pg, timer, w, what, rows, fp8=True)
                            del w
                    except Exception as e:  # record and carry on with the other shapes
                        rows.append({"op": what, "batch": batch, "context": context, "error": repr(e)})
                    torch.cuda.empty_cache()
                    flush()
        try:
            run_indexer_max_context(pg, timer, gen, rows)
        except Exception as e:
            rows.append({"op": "indexer_max_context_check", "error": repr(e)})
        for batch in ([] if args.skip_output_projection else batches):
            try:
                run_output_projection(pg, timer, batch, gen, rows)
            except Exception as e:
                rows.append({"op": "output_projection", "batch": batch, "error": repr(e)})
        flush()
    print(f"{'op':<26}{'B':>5}{'ctx':>9}{'ours us':>10}{'torch us':>10}{'x':>7}{'TB/s':>7}{'TFLOP/s':>9}{'roof':>6}")
    for r in printed:
        if "error" in r:
            print(f"{r['op']:<26}{r.get('batch', ''):>5}{r.get('context', ''):>9}  ERROR {r['error'][:60]}")
        elif r["op"] == "indexer_max_context_check":
            print(f"{r['op']:<26}{r['batch']:>5}{r['context']:>9}  8K {r['us_max_context_8k']} us, 1M "
                  f"{r['us_max_context_1m']} us, ratio {r['ratio_1m_over_8k']}")
        else:
            ctx = "-" if r["context"] is None else r["context"]
            print(f"{r['op']:<26}{r['batch']:>5}{ctx:>9}{r['ours_us']:>10.1f}{r['torch_us']:>10.1f}"
                  f"{r['speedup_vs_torch']:>7.1f}{r['tb_s']:>7.2f}{r['tflop_s']:>9.1f}{r['roofline_fraction']:>6.2f}")
            if r["op"] == "indexer_topk":
                print("    phases (us): " + ", ".join(f"{k[6:-3]} {v}" for k, v in r.items()
                                                      if k.startswith("phase_") and v is not None))
    print(f"wrote {args.out} in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
