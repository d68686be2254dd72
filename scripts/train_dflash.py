#!/usr/bin/env python3
"""train_dflash.py — trains a DFlash block-diffusion drafter for a small
llama-architecture target (the bundled stories260K) and writes it as a GGUF
that `muser run --draft` loads (docs/dflash.md has the format and semantics).

    /usr/bin/python3 scripts/train_dflash.py -m models/stories260K/stories260K.gguf \
        -o models/stories260K/stories260K-dflash.gguf

Steps, each matching what Muser does at inference (src/engine/spec.c,
src/cpu/cpu_spec.c):

  1. The target's forward in torch, checked against the llama2.c reference
     logits in models/stories260K/reference/ (--check-only stops there).
  2. Self-distillation text: the target generates sequences from BOS or from
     TinyStories-like prompts, mostly greedy with a few sampled tokens (so the
     contexts are diverse but the continuations are the target's greedy ones,
     which is what a --temp 0 run accepts), some fully sampled.
  3. Features: the residual stream entering each of the drafter's target
     layers (Muser's capture: cpu_forward copies b->x at the top of layer l,
     before attn_norm; for llama there is no embedding norm, so layer 0's
     input would be the raw embedding row).
  4. Training, the block-diffusion objective: for an anchor position P the
     drafter holds K/V made from the fused features of positions 0..P-1, gets
     the noise block [t_P, mask x (b-1)] at positions P..P+b-1, attends
     non-causally, and predicts t_{P+1}..t_{P+b-1} through the target's
     (frozen, shared) embedding and LM head. The label of block row i is the
     target's greedy choice for position P+i; a row counts only while the
     tokens before it in the block are the target's greedy ones too, so every
     label is the greedy rollout from P (what verification keeps).
  5. A greedy speculative decode in torch (the same draft/verify/commit loop
     as spec.c) reports the mean accepted length to compare with `muser run`,
     then the GGUF is written (gguf_io.py).

Deterministic for a --seed on one device and thread count.
"""
import argparse
import ctypes
import math
import os
import sys
import time

# cuBLAS is deterministic only with a fixed workspace; set before torch loads.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_io  # noqa: E402


def keep_freed_memory():
    """glibc returns every freed block over 128 KiB to the kernel (mmap), so
    each of torch's temporaries faults its pages in again; on the small VMs
    this runs on that cost more than the arithmetic (measured: a 1M-float
    multiply 6x slower with a fresh output than into a kept one). Serving
    those sizes from the heap and never trimming it keeps the pages mapped
    between steps."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD: never give the heap back
    except OSError:
        pass  # not glibc: nothing to tune


# ---- shared pieces of both forwards -----------------------------------------


def rmsnorm(x, w, eps):
    """Muser's mu_rmsnorm: x / sqrt(mean(x^2) + eps) * w (w may be None)."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def rope(x, pos, n_rot, base, neox):
    """x [..., T, H, hd] rotated at positions pos [..., T] (broadcastable).
    NORM rotates the pairs (2i, 2i+1), NEOX (i, i + n_rot/2); theta_i =
    pos * base^(-2i/n_rot), as model/rope.c and cpu/ops.c."""
    half = n_rot // 2
    inv = base ** (-2.0 * torch.arange(half, dtype=torch.float64, device=x.device) / n_rot)
    ang = pos.to(torch.float64)[..., None] * inv  # [..., T, half]
    cos = ang.cos().to(x.dtype)[..., None, :]  # [..., T, 1, half]: the same for every head
    sin = ang.sin().to(x.dtype)[..., None, :]
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    ra, rb = a * cos - b * sin, a * sin + b * cos
    rot = torch.cat([ra, rb], -1) if neox else torch.stack([ra, rb], -1).flatten(-2)
    return torch.cat([rot, x[..., n_rot:]], -1)


def attend(q, k, v, allow, scale):
    """q [S, Tq, H, hd], k/v [S, Tk, Hkv, hd], allow [S, Tq, Tk] bool (or
    broadcastable). GQA as Muser: query head h reads KV head h / (H / Hkv)."""
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    s = torch.einsum("sqhd,skhd->shqk", q, k) * scale
    s = s.masked_fill(~allow[:, None], float("-inf"))
    return torch.einsum("shqk,skhd->sqhd", s.softmax(-1), v)


def attend_one(q, k, v, scale):
    """attend() for one query row per sequence and every key visible:
    q [S, 1, H, hd], k/v [S, Tk, Hkv, hd]. The reference BLAS here makes
    thousands of tiny matrix products slower than these broadcasts."""
    S, _, H, hd = q.shape
    Hkv = k.shape[2]
    qg = q.view(S, 1, Hkv, H // Hkv, hd)
    s = (qg * k[:, :, :, None]).sum(-1) * scale  # [S, Tk, Hkv, group]
    p = s.softmax(1)
    return (p[..., None] * v[:, :, :, None]).sum(1).reshape(S, 1, H, hd)


# ---- the target --------------------------------------------------------------


class Target:
    """A llama-architecture GGUF (F32/F16 tensors) as torch tensors. Weights
    are (rows, cols) = (out, in): y = x @ W.T."""

    def __init__(self, path, device, dtype=torch.float32):
        meta, t = gguf_io.read(path)
        arch = meta["general.architecture"].value
        if arch != "llama":
            raise SystemExit(f"{path}: architecture '{arch}' (this script trains drafters for llama targets)")
        k = lambda name, d=None: meta[f"llama.{name}"].value if f"llama.{name}" in meta else d  # noqa: E731
        self.meta, self.path = meta, path
        self.n_embd, self.n_layer = k("embedding_length"), k("block_count")
        self.n_head = k("attention.head_count")
        self.n_head_kv = k("attention.head_count_kv", self.n_head)
        self.head_dim = self.n_embd // self.n_head
        self.n_rot = k("rope.dimension_count", self.head_dim)
        self.eps = k("attention.layer_norm_rms_epsilon")
        self.base = k("rope.freq_base", 10000.0)
        self.n_ctx = k("context_length")
        T = lambda n: torch.tensor(t[n].astype(np.float32), dtype=dtype, device=device)  # noqa: E731
        self.tok_embd = T("token_embd.weight")  # [V, E]
        self.output = T("output.weight") if "output.weight" in t else self.tok_embd  # [V, E]
        self.output_norm = T("output_norm.weight")
        self.n_vocab = self.tok_embd.shape[0]
        names = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                 "ffn_down"]
        self.layers = [{n: T(f"blk.{l}.{n}.weight") for n in names} for l in range(self.n_layer)]
        self.bos = meta["tokenizer.ggml.bos_token_id"].value

    def _qkv(self, L, x, pos):
        S, Tn, _ = x.shape
        a = rmsnorm(x, L["attn_norm"], self.eps)
        q = (a @ L["attn_q"].T).view(S, Tn, self.n_head, self.head_dim)
        k = (a @ L["attn_k"].T).view(S, Tn, self.n_head_kv, self.head_dim)
        v = (a @ L["attn_v"].T).view(S, Tn, self.n_head_kv, self.head_dim)
        return rope(q, pos, self.n_rot, self.base, False), rope(k, pos, self.n_rot, self.base, False), v

    def _ffn(self, L, x):
        a = rmsnorm(x, L["ffn_norm"], self.eps)
        return x + (F.silu(a @ L["ffn_gate"].T) * (a @ L["ffn_up"].T)) @ L["ffn_down"].T

    def _head(self, x):
        return rmsnorm(x, self.output_norm, self.eps) @ self.output.T

    @torch.no_grad()
    def forward(self, tokens, capture=()):
        """tokens [S, T] at positions 0..T-1 -> logits [S, T, V] and the
        inputs of the layers in `capture`, concatenated in that order [S, T, n * E]."""
        S, Tn = tokens.shape
        pos = torch.arange(Tn, device=tokens.device)
        causal = torch.ones(Tn, Tn, dtype=torch.bool, device=tokens.device).tril()[None]
        x = self.tok_embd[tokens]
        caps = {}
        for l, L in enumerate(self.layers):
            if l in capture:
                caps[l] = x  # the residual stream entering layer l: Muser's capture
            q, k, v = self._qkv(L, x, pos)
            o = attend(q, k, v, causal, 1.0 / math.sqrt(self.head_dim)).reshape(S, Tn, -1)
            x = self._ffn(L, x + o @ L["attn_output"].T)
        feats = torch.cat([caps[l] for l in capture], -1) if capture else None
        return self._head(x), feats

    @torch.no_grad()
    def generate(self, prefix, n_new, gen, temp, p_sample):
        """Continues each row of prefix [S, T0] by n_new tokens with a KV cache.
        Each new token is sampled at temp[s] with probability p_sample[s], else
        the argmax. Returns [S, T0 + n_new]."""
        S, T0 = prefix.shape
        dev = prefix.device
        Tn = T0 + n_new
        kc = [torch.zeros(S, Tn, self.n_head_kv, self.head_dim, device=dev) for _ in self.layers]
        vc = [torch.zeros_like(c) for c in kc]
        out = torch.cat([prefix, torch.zeros(S, n_new, dtype=prefix.dtype, device=dev)], 1)
        allow_all = torch.ones(Tn, Tn, dtype=torch.bool, device=dev).tril()[None]

        def step(toks, p0):  # toks [S, t] at positions p0.. -> last row's logits
            t = toks.shape[1]
            pos = torch.arange(p0, p0 + t, device=dev)
            x = self.tok_embd[toks]
            for l, L in enumerate(self.layers):
                q, k, v = self._qkv(L, x, pos)
                kc[l][:, p0:p0 + t], vc[l][:, p0:p0 + t] = k, v
                if t == 1:  # one row: elementwise, no per-(sequence, head) BLAS calls
                    o = attend_one(q, kc[l][:, :p0 + 1], vc[l][:, :p0 + 1], 1.0 / math.sqrt(self.head_dim))
                else:
                    allow = allow_all[:, p0:p0 + t, :p0 + t]
                    o = attend(q, kc[l][:, :p0 + t], vc[l][:, :p0 + t], allow, 1.0 / math.sqrt(self.head_dim))
                x = self._ffn(L, x + o.reshape(S, t, -1) @ L["attn_output"].T)
            return self._head(x[:, -1])

        logits = step(prefix, 0)
        for p in range(T0, Tn):
            probs = (logits / temp[:, None]).softmax(-1)
            sampled = torch.multinomial(probs, 1, generator=gen)[:, 0]
            use = torch.rand(S, generator=gen, device=dev) < p_sample
            out[:, p] = torch.where(use, sampled, logits.argmax(-1))
            if p + 1 < Tn:
                logits = step(out[:, p:p + 1], p)
        return out


def check_reference(tg, ref_dir):
    """The target's logits against llama2.c's (run.c, fp32) for every
    reference file: returns the largest absolute difference."""
    worst = 0.0
    for name in sorted(os.listdir(ref_dir)):
        if not name.endswith(".logits.txt"):
            continue
        rows = [ln for ln in open(os.path.join(ref_dir, name)) if ln.startswith("LOGITS")]
        toks = [int(ln.split("token=")[1].split(":")[0]) for ln in rows]
        ref = np.array([[float(v) for v in ln.split(":", 1)[1].split()] for ln in rows])
        logits, _ = tg.forward(torch.tensor([toks], device=tg.tok_embd.device))
        d = float(np.abs(logits[0].double().cpu().numpy() - ref).max())
        print(f"reference {name}: {len(toks)} positions, max |logit - llama2.c| = {d:.2e}")
        worst = max(worst, d)
    return worst


# ---- prompts: the target's SentencePiece vocabulary -----------------------------


def tokenize(meta, text):
    """llama's SentencePiece BPE as the target's file describes it: a dummy
    prefix space, spaces as U+2581, then repeatedly the adjacent pair whose
    merge is a token with the best score (the leftmost on ties); characters
    outside the vocabulary become their UTF-8 byte tokens <0xXX>."""
    vocab = meta["tokenizer.ggml.tokens"].value
    scores = meta["tokenizer.ggml.scores"].value
    ids = {s: i for i, s in enumerate(vocab)}
    syms = list(("\u2581" + text).replace(" ", "\u2581"))
    while True:
        best, at = None, -1
        for i in range(len(syms) - 1):
            j = ids.get(syms[i] + syms[i + 1])
            if j is not None and (best is None or scores[j] > scores[best]):
                best, at = j, i
        if best is None:
            break
        syms[at:at + 2] = [syms[at] + syms[at + 1]]
    out = []
    for s in syms:
        if s in ids:
            out.append(ids[s])
        else:
            out += [ids[f"<0x{b:02X}>"] for b in s.encode("utf-8")]
    return out


# TinyStories-like openings: subjects x starts, so the contexts cover the
# prompts a user types (the test and README use several of them).
SUBJECTS = ["a little girl named Lily", "a boy named Tom", "a big dog", "a small cat", "a little bird",
            "Sue and her mom", "a happy frog", "a kind old man", "a little bear", "Ben and Mia"]
STARTS = ["Once upon a time, there was {}", "One day, {}", "{} wanted to play", "{} went to the park",
          "{} had a red ball", "{} saw a big tree"]
EXTRA = ["Once upon a time", "The little dog", "Tom and Sue", "Lily liked to", "The sun was", "One day",
         "In the park", "Mom said", "The cat", "There was a"]


def prompt_list():
    out = [s.format(x) for s in STARTS for x in SUBJECTS] + EXTRA
    return [p[0].upper() + p[1:] for p in out]


# ---- the drafter ---------------------------------------------------------------


class Drafter(torch.nn.Module):
    """A DFlash decoder (docs/dflash.md 1.3). Parameter names are the GGUF
    tensor names with '.' -> '_' (torch forbids dots); tok_embd and output
    are the target's, frozen and never written."""

    def __init__(self, tg, a):
        super().__init__()
        E, W = tg.n_embd, len(a.target_layers) * tg.n_embd
        self.tg, self.a = tg, a
        self.n_head, self.n_head_kv, self.head_dim = a.heads, a.kv_heads, a.head_dim
        Q, KV = a.heads * a.head_dim, a.kv_heads * a.head_dim
        P = torch.nn.Parameter

        def lin(rows, cols, gain=1.0):
            return P(torch.randn(rows, cols) * (gain / math.sqrt(cols)))

        self.fc = lin(E, W)
        self.enc_norm = P(torch.ones(E))
        # the target's final norm: the shared head starts out calibrated
        self.output_norm = P(tg.output_norm.detach().clone())
        # residual branches start small so the stack starts near the identity
        out_gain = 1.0 / math.sqrt(2 * a.layers)
        self.blocks = torch.nn.ModuleList()
        for _ in range(a.layers):
            m = torch.nn.Module()
            m.attn_norm, m.ffn_norm = P(torch.ones(E)), P(torch.ones(E))
            m.attn_q, m.attn_k, m.attn_v = lin(Q, E), lin(KV, E), lin(KV, E)
            m.attn_output = lin(E, Q, out_gain)
            m.attn_q_norm, m.attn_k_norm = P(torch.ones(a.head_dim)), P(torch.ones(a.head_dim))
            m.ffn_gate, m.ffn_up, m.ffn_down = lin(a.ff, E), lin(a.ff, E), lin(E, a.ff, out_gain)
            self.blocks.append(m)

    def forward(self, feats, blocks, rows=None):
        """feats [S, Lc, W]: the target features of context positions
        0..Lc-1; blocks: block_batch()'s noise blocks (A per sequence, B rows
        each). Returns the block rows' logits [S, A, B, V], or only those of
        the rows where the bool mask rows [S, A, B] is set ([n, V]: the LM
        head is a third of a training step, and most rows are not scored).

        Attention is split in two because a block row sees the context before
        its anchor and its own block, never another block: one product
        against the shared context keys, one within each block, and a
        softmax over both (half the work of one masked product over every
        block's keys, which dominated the step on the CPU)."""
        a, eps = self.a, self.a.eps
        tok, pos, ctx_ok, key_ok = blocks
        S, Lc, _ = feats.shape
        A, B = tok.shape[1], tok.shape[2]
        hd, nkv = self.head_dim, self.n_head_kv
        G = self.n_head // nkv  # query head h = kv head h // G, as Muser
        # encoder: g = rms(fc . features) * enc_norm (fc.scale is not written: 1)
        g = rmsnorm(feats @ self.fc.T, self.enc_norm, eps)
        ctx_pos = torch.arange(Lc, device=feats.device)
        x = self.tg.tok_embd[tok]  # [S, A, B, E] raw embedding rows: no embedding norm
        neg = torch.tensor(float("-inf"), device=feats.device)
        for m in self.blocks:
            # K/V injection: no attention norm, the fused row straight into Wk, Wv
            kc = rope(rmsnorm((g @ m.attn_k.T).view(S, Lc, nkv, hd), m.attn_k_norm, eps), ctx_pos, hd,
                      a.rope_base, True)
            vc = (g @ m.attn_v.T).view(S, Lc, nkv, hd)
            h = rmsnorm(x, m.attn_norm, eps)
            q = rope(rmsnorm((h @ m.attn_q.T).view(S, A, B, nkv * G, hd), m.attn_q_norm, eps), pos, hd,
                     a.rope_base, True).view(S, A, B, nkv, G, hd)
            kb = rope(rmsnorm((h @ m.attn_k.T).view(S, A, B, nkv, hd), m.attn_k_norm, eps), pos, hd,
                      a.rope_base, True)
            vb = (h @ m.attn_v.T).view(S, A, B, nkv, hd)
            sc = torch.einsum("sabkgd,slkd->sabkgl", q, kc)
            sb = torch.einsum("sabkgd,sackd->sabkgc", q, kb)
            sc = torch.where(ctx_ok[:, :, :, None, None], sc, neg)
            sb = torch.where(key_ok[:, :, :, None, None], sb, neg)
            p = (torch.cat([sc, sb], -1) / math.sqrt(hd)).softmax(-1)
            o = torch.einsum("sabkgl,slkd->sabkgd", p[..., :Lc], vc) + \
                torch.einsum("sabkgc,sackd->sabkgd", p[..., Lc:], vb)
            x = x + o.reshape(S, A, B, -1) @ m.attn_output.T
            h = rmsnorm(x, m.ffn_norm, eps)
            x = x + (F.silu(h @ m.ffn_gate.T) * (h @ m.ffn_up.T)) @ m.ffn_down.T
        # the target's LM head, without its logit scale or softcap (llama has none)
        if rows is not None:
            x = x[rows]
        return rmsnorm(x, self.output_norm, eps) @ self.tg.output.T


def block_batch(n_tok, anchors, blen, B, mask_id, Lc):
    """The noise blocks of anchors [S, A] (block lengths blen [S, A]) over
    sequences n_tok [S, >= max anchor + 1]: tokens and positions [S, A, B]
    (row 0 is the anchor's token, the others the mask), which context
    positions each block sees [S, A, 1, Lc] (those before its anchor) and
    which of its own rows [S, A, 1, B] (rows past blen are padding: computed,
    never seen, never scored)."""
    dev = n_tok.device
    j = torch.arange(B, device=dev)
    tok = torch.full(anchors.shape + (B,), mask_id, dtype=torch.long, device=dev)
    tok[:, :, 0] = n_tok.gather(1, anchors)
    pos = anchors[:, :, None] + j
    ctx_ok = torch.arange(Lc, device=dev) < anchors[:, :, None, None]
    key_ok = j < blen[:, :, None, None]
    return tok, pos, ctx_ok, key_ok


# ---- data ---------------------------------------------------------------------


def make_data(tg, a, n_seq, gen, dev, tag):
    """n_seq self-distilled sequences of a.seq_len tokens: (tokens [N, L],
    features [N, L, W], greedy labels [N, L] (the target's argmax after each
    position), greedy [N, L] (whether each token is the argmax of the one before))."""
    prompts = [tokenize(tg.meta, p) for p in prompt_list()]
    L = a.seq_len
    toks, feats, labels = [], [], []
    t0 = time.time()
    for s0 in range(0, n_seq, a.gen_batch):
        S = min(a.gen_batch, n_seq - s0)
        # per sequence: a prompt (half of them) or a few sampled opening tokens
        # from BOS; then mostly greedy with a sampled token now and then; a
        # quarter fully sampled (contexts for runs at --temp > 0)
        r = torch.rand(S, 4, generator=gen, device=dev)
        pick = torch.randint(len(prompts), (S,), generator=gen, device=dev).tolist()
        temp = 0.7 + 0.4 * r[:, 0]
        p_sample = torch.where(r[:, 1] < 0.25, torch.ones(S, device=dev), 0.12 * r[:, 2])
        rows = []
        for i in range(S):
            use_prompt = bool(r[i, 3] < 0.5) and p_sample[i] < 1
            rows.append([tg.bos] + (prompts[pick[i]] if use_prompt else []))
        # rows of one batch share a prefix length: group by it
        out = torch.empty(S, L, dtype=torch.long, device=dev)
        for n in sorted({len(x) for x in rows}):
            idx = [i for i, x in enumerate(rows) if len(x) == n]
            pre = torch.tensor([rows[i] for i in idx], device=dev)
            ii = torch.tensor(idx, device=dev)
            # a few sampled tokens right after the prefix diversify the openings
            n_open = 6 if n == 1 else 0
            if n_open:
                pre = tg.generate(pre, n_open, gen, temp[ii], torch.ones(len(idx), device=dev))
            out[ii] = tg.generate(pre, L - pre.shape[1], gen, temp[ii], p_sample[ii])
        for c0 in range(0, S, a.feat_batch):
            logits, f = tg.forward(out[c0:c0 + a.feat_batch], a.target_layers)
            feats.append(f.to(torch.float16 if a.feat_f16 else torch.float32))
            labels.append(logits.argmax(-1))
        toks.append(out)
    toks, feats, labels = torch.cat(toks), torch.cat(feats), torch.cat(labels)
    greedy = torch.ones_like(toks, dtype=torch.bool)
    greedy[:, 1:] = toks[:, 1:] == labels[:, :-1]
    print(f"{tag}: {n_seq} sequences x {L} tokens in {time.time() - t0:.1f} s; "
          f"{100 * greedy[:, 1:].float().mean():.1f}% of tokens are the target's greedy choice")
    return toks, feats, labels, greedy


def sample_anchors(n, L, A, B, gen, dev, full_frac):
    """A anchors per sequence in [1, L - 2] and their block lengths: the full
    block with probability full_frac, else uniform in [2, B] (Muser drafts
    --draft-max + 1 rows, and the block must stay in the sequence)."""
    anchors = torch.randint(1, L - 1, (n, A), generator=gen, device=dev)
    blen = torch.randint(2, B + 1, (n, A), generator=gen, device=dev)
    full = torch.rand(n, A, generator=gen, device=dev) < full_frac
    blen = torch.where(full, torch.full_like(blen, B), blen)
    return anchors, torch.minimum(blen, L - anchors)


def block_targets(labels, greedy, anchors, blen, B, gamma):
    """Labels and weights [S, A, B] of the block rows: row j's label is the
    target's choice for position P + j (labels[P + j - 1]); it counts if
    1 <= j < blen and the tokens at P+1 .. P+j-1 are greedy, weighted
    exp(-(j - 1) / gamma): early rows decide the accepted length."""
    S, A = anchors.shape
    j = torch.arange(B, device=anchors.device)
    p = (anchors[:, :, None] + j - 1).clamp(0, labels.shape[1] - 1)  # position P + j - 1
    lab = labels.gather(1, p.reshape(S, -1)).reshape(S, A, B)
    g = greedy.gather(1, (p + 1).clamp(max=labels.shape[1] - 1).reshape(S, -1)).reshape(S, A, B)
    # the row is a greedy rollout while every token P+1 .. P+j-1 is greedy
    g = torch.cat([torch.ones_like(g[:, :, :2]), g[:, :, 1:-1]], -1).cumprod(-1).bool()
    ok = (j >= 1) & (j < blen[:, :, None]) & g
    w = torch.exp(-(j.float() - 1).clamp(min=0) / gamma) * ok
    return lab, w, ok


@torch.no_grad()
def evaluate(dr, data, a, gen, dev):
    """On held-out sequences with full blocks: the share of scored rows
    right at block rows 1, 2 and 3, and the mean accepted length 1 + E[leading
    rows right] (a row past a non-greedy token stops the count, so it is a
    lower bound)."""
    toks, feats, labels, greedy = data
    B = a.block
    hit, rows, acc, n_blk = torch.zeros(B), torch.zeros(B), 0, 0
    for s0 in range(0, toks.shape[0], a.batch):
        sl = slice(s0, s0 + a.batch)
        n = toks[sl].shape[0]
        anchors, blen = sample_anchors(n, a.seq_len, a.anchors, B, gen, dev, 1.0)
        logits = dr(feats[sl].float(), block_batch(toks[sl], anchors, blen, B, a.mask_id, a.seq_len))
        lab, _, ok = block_targets(labels[sl], greedy[sl], anchors, blen, B, a.gamma)
        right = (logits.argmax(-1) == lab) & ok
        hit += right.sum((0, 1)).cpu()
        rows += ok.sum((0, 1)).cpu()
        acc += int(right[:, :, 1:].int().cumprod(-1).sum())
        n_blk += anchors.numel()
    per_row = (hit / rows.clamp(min=1))[1:4].tolist()
    return per_row, 1.0 + acc / max(n_blk, 1)


# ---- a greedy speculative decode, as src/engine/spec.c --------------------------


@torch.no_grad()
def spec_decode(tg, dr, a, prompt_ids, n_new, draft_max):
    """Greedy speculative decoding of n_new tokens after BOS + prompt_ids:
    returns (tokens, steps, drafted, accepted). Recomputes the target over the
    whole sequence each step (simple; the sequences are short)."""
    dev = tg.tok_embd.device
    seq = [tg.bos] + prompt_ids
    logits, _ = tg.forward(torch.tensor([seq], device=dev))
    last, out, steps, drafted, accepted = int(logits[0, -1].argmax()), [], 0, 0, 0
    while len(out) < n_new:
        out.append(last)
        left = n_new - len(out)  # as cmd_run.c: the step may bring left tokens, so left - 1 drafts
        n = min(draft_max, left - 1)
        if left == 0:
            break
        if n < 1:  # spec.c's plain step (not counted as a speculative step)
            logits, _ = tg.forward(torch.tensor([seq + [last]], device=dev))
            seq.append(last)
            last = int(logits[0, -1].argmax())
            continue
        P = len(seq)
        _, feats = tg.forward(torch.tensor([seq], device=dev), a.target_layers)
        anchors = torch.tensor([[P]], device=dev)
        blen = torch.tensor([[n + 1]], device=dev)
        ext = torch.cat([torch.tensor([seq], device=dev), torch.tensor([[last]], device=dev)], 1)
        d = dr(feats, block_batch(ext, anchors, blen, n + 1, a.mask_id, P))[0, 0, 1:].argmax(-1).tolist()
        logits, _ = tg.forward(torch.tensor([seq + [last] + d], device=dev))
        choice = logits[0, P:].argmax(-1).tolist()  # the target's token after each block row
        k = 0
        while k < n and choice[k] == d[k]:
            k += 1
        seq += [last] + d[:k]
        out += d[:k]
        last = choice[k]
        steps, drafted, accepted = steps + 1, drafted + n, accepted + k
    return out[:n_new], steps, drafted, accepted


# ---- writing the GGUF ----------------------------------------------------------


def write_gguf(path, tg, dr, a):
    """Muser's and llama.cpp's dflash keys (the ones `muser synth --draft`
    writes), the target's tokenizer, and the decoder's tensors; no
    token_embd/output (the target's are shared) and no sliding window."""
    E = tg.n_embd
    mt = np.float16 if a.dtype == "f16" else np.float32
    M = gguf_io
    meta = {
        "general.architecture": M.string("dflash"),
        "general.name": M.string(a.name),
        "general.file_type": M.u32(1 if a.dtype == "f16" else 0),
        "dflash.block_count": M.u32(a.layers),
        "dflash.context_length": M.u32(tg.n_ctx),
        "dflash.embedding_length": M.u32(E),
        "dflash.feed_forward_length": M.u32(a.ff),
        "dflash.attention.head_count": M.u32(a.heads),
        "dflash.attention.head_count_kv": M.u32(a.kv_heads),
        "dflash.attention.key_length": M.u32(a.head_dim),
        "dflash.attention.value_length": M.u32(a.head_dim),
        "dflash.attention.layer_norm_rms_epsilon": M.f32(a.eps),
        "dflash.rope.freq_base": M.f32(a.rope_base),
        "dflash.block_size": M.u32(a.block),
        "dflash.target_layers": M.arr_i32(a.target_layers),
        "tokenizer.ggml.mask_token_id": M.u32(a.mask_id),
    }
    for k, v in tg.meta.items():  # the target's tokenizer, as the converters copy it
        if k.startswith("tokenizer.") and k != "tokenizer.ggml.mask_token_id":
            meta[k] = v
    f32 = lambda t: t.detach().cpu().float().numpy().astype(np.float32)  # noqa: E731
    mat = lambda t: t.detach().cpu().float().numpy().astype(mt)  # noqa: E731
    ten = {"fc.weight": mat(dr.fc), "enc.output_norm.weight": f32(dr.enc_norm),
           "output_norm.weight": f32(dr.output_norm)}
    for l, m in enumerate(dr.blocks):
        for n in ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
                  "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]:
            t = getattr(m, n)
            ten[f"blk.{l}.{n}.weight"] = f32(t) if t.dim() == 1 else mat(t)
    gguf_io.write(path, meta, ten)
    print(f"wrote {path} ({os.path.getsize(path) / 1024:.0f} KiB, {sum(p.numel() for p in dr.parameters())} "
          f"parameters, {a.layers} layers, block {a.block}, target layers {a.target_layers})")


# ---- main ------------------------------------------------------------------------


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("-m", "--model", default="models/stories260K/stories260K.gguf", help="the target GGUF")
    p.add_argument("-o", "--out", default="models/stories260K/stories260K-dflash.gguf", help="the drafter GGUF")
    p.add_argument("--reference", default=None,
                   help="folder of llama2.c reference logits (default: reference/ beside the model, if present)")
    p.add_argument("--check-only", action="store_true", help="check the target's forward and stop")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (cuda when available)")
    # one thread: on a shared 2-core machine torch's second OpenMP thread
    # waits for a time slice at every op's barrier (measured 5-10x slower)
    p.add_argument("--threads", type=int, default=1, help="CPU threads for torch")
    p.add_argument("--seed", type=int, default=1)
    g = p.add_argument_group("the drafter")
    g.add_argument("--target-layers", default="1,2,3,4", help="target layer inputs fused, in order")
    g.add_argument("--block", type=int, default=16, help="block size: the last token + block-1 masks")
    g.add_argument("--layers", type=int, default=2)
    g.add_argument("--heads", type=int, default=4)
    g.add_argument("--kv-heads", type=int, default=2)
    g.add_argument("--head-dim", type=int, default=16)
    g.add_argument("--ff", type=int, default=192, help="feed-forward width")
    g.add_argument("--mask-id", type=int, default=0, help="the mask token (stories260K: <unk>, never generated)")
    g.add_argument("--rope-base", type=float, default=10000.0)
    g.add_argument("--eps", type=float, default=1e-5, help="RMS norm epsilon")
    g.add_argument("--dtype", choices=["f16", "f32"], default="f16", help="type of the written matrices")
    g.add_argument("--name", default="stories260K-dflash")
    g = p.add_argument_group("data and training")
    g.add_argument("--n-seq", type=int, default=1024, help="training sequences")
    g.add_argument("--n-val", type=int, default=64, help="held-out sequences")
    g.add_argument("--seq-len", type=int, default=256)
    g.add_argument("--gen-batch", type=int, default=256)
    g.add_argument("--feat-batch", type=int, default=64)
    g.add_argument("--feat-f16", action="store_true", help="keep the features as f16 (halves the memory)")
    g.add_argument("--steps", type=int, default=1500)
    g.add_argument("--batch", type=int, default=8, help="sequences per step")
    g.add_argument("--anchors", type=int, default=16, help="blocks per sequence per step")
    g.add_argument("--full-frac", type=float, default=0.6, help="share of blocks of the full length")
    g.add_argument("--gamma", type=float, default=6.0, help="loss weight decay over block rows")
    g.add_argument("--lr", type=float, default=3e-3)
    g.add_argument("--eval-every", type=int, default=100)
    g.add_argument("--spec-prompts", default="Once upon a time|The little dog|Tom and Sue|Lily liked to",
                   help="prompts of the final greedy speculative decode, '|'-separated")
    return p.parse_args()


def main():
    a = parse_args()
    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(a.device)
    keep_freed_memory()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True)
    a.target_layers = [int(x) for x in a.target_layers.split(",")]

    tg = Target(a.model, dev)
    print(f"target {a.model}: {tg.n_layer} layers, n_embd {tg.n_embd}, vocab {tg.n_vocab}, device {dev}")
    ref = a.reference or os.path.join(os.path.dirname(a.model), "reference")
    if os.path.isdir(ref):
        worst = check_reference(tg, ref)
        if worst > 1e-3:
            raise SystemExit(f"the target's forward disagrees with the reference by {worst:.2e}")
    want = "Once upon a time"
    print(f"tokenize({want!r}) = {tokenize(tg.meta, want)}")
    if a.check_only:
        return
    if not all(0 <= l < tg.n_layer for l in a.target_layers):
        raise SystemExit(f"--target-layers: each must be a layer input 0..{tg.n_layer - 1}")
    if not 2 <= a.block <= 256:
        raise SystemExit("--block must be in [2, 256]")

    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    train = make_data(tg, a, a.n_seq, gen, dev, "train")
    val = make_data(tg, a, a.n_val, gen, dev, "val")

    dr = Drafter(tg, a).to(dev)
    params = [p for p in dr.parameters()]
    decay = [p for p in params if p.dim() == 2]
    rest = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.98))
    warm = max(1, a.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, a.steps) / a.steps)))
    toks, feats, labels, greedy = train
    N, B = toks.shape[0], a.block
    t0, run_loss = time.time(), None
    for step in range(1, a.steps + 1):
        idx = torch.randint(N, (a.batch,), generator=gen, device=dev)
        anchors, blen = sample_anchors(a.batch, a.seq_len, a.anchors, B, gen, dev, a.full_frac)
        lab, w, ok = block_targets(labels[idx], greedy[idx], anchors, blen, B, a.gamma)
        logits = dr(feats[idx].float(), block_batch(toks[idx], anchors, blen, B, a.mask_id, a.seq_len), ok)
        ce = F.cross_entropy(logits, lab[ok], reduction="none")
        loss = (ce * w[ok]).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        run_loss = float(loss) if run_loss is None else 0.95 * run_loss + 0.05 * float(loss)
        if step % a.eval_every == 0 or step == a.steps:
            egen = torch.Generator(device=dev)
            egen.manual_seed(a.seed + 7)  # the same held-out blocks every time
            dr.eval()
            per_row, tau = evaluate(dr, val, a, egen, dev)
            dr.train()
            rows = ", ".join(f"{100 * r:.0f}%" for r in per_row)
            print(f"step {step}/{a.steps}: loss {run_loss:.3f}, held-out rows 1-3 right {rows}, "
                  f"accepted length (block {B}) {tau:.2f}, {time.time() - t0:.0f} s")

    dr.eval()
    with torch.no_grad():  # the matrices as the file will hold them, so the check below sees what Muser runs
        for p in decay:
            p.copy_(p.to(torch.float16 if a.dtype == "f16" else torch.float32).float())
    for prompt in a.spec_prompts.split("|"):
        ids = tokenize(tg.meta, prompt)
        _, steps, drafted, acc = spec_decode(tg, dr, a, ids, 128, a.block - 1)
        print(f"spec {prompt!r}, 128 tokens greedy: {steps} steps, {drafted} drafted, {acc} accepted, "
              f"mean accepted length {(acc + steps) / steps:.2f}")
    write_gguf(a.out, tg, dr, a)


if __name__ == "__main__":
    main()
