#!/usr/bin/env python3
"""st_reference.py — the first training step's losses of a tessera GPT-2, dense
or mixture-of-experts, computed from its safetensors file in double precision
with the standard library alone: an independent check of tessera's forward
pass, its router and its auxiliary losses.

    python3 st_reference.py --weights w.safetensors --tokens data.bin \
        --batch B --seq T --heads NH [--top-k K --aux-coeff A --z-coeff Z]

prints {"loss": ..., "aux_loss": ..., "z_loss": ...}, to compare with step 1 of
`tessera train`'s metrics ("loss", "moe"."aux_loss", "moe"."z_loss"), which
are f32 sums: they agree to about 1e-6 relative.

The weights (docs/formats.md): transformers' GPT-2 names, Conv1D weights
stored [in, out] (y = x W + b), F32, BF16 or F16. The shape keys (layers,
d_model, vocab, context, experts, moe_every, expert_hidden, top_k, heads) are
read from "__metadata__" where present and checked against the tensors and
the command line; else the tensors' shapes and the command line give them (a
block is an MoE block when it has h.L.mlp.router.weight).

The batch: the llm.c token file (256 int32 header: magic 20240520, version
1, token count n; then n uint16), windows 0 .. B-1 of [data] shuffle =
false (core/train/data.h): window w is tokens[s : s + T + 1], s = (w mod
((n - 1) // T)) * T, inputs its first T, targets its last T.

The model (core/model/gpt2.c, kernels/cpu):
  x = wte[tokens] + wpe[t]
  per block:  x += c_proj(attn(c_attn(ln_1(x))));  x += mlp(ln_2(x))
  LayerNorm   (x - mean) / sqrt(var + 1e-5) * weight + bias, var biased
  attention   per head, causal, softmax(q k^T / sqrt(C / NH)) v; head h is
              columns h*hs .. h*hs + hs - 1 of each of c_attn's q, k, v blocks
  dense MLP   c_proj(gelu(c_fc(x))), gelu the tanh form
              0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  loss        ln_f, logits = x wte^T over the V real rows, the mean over the
              B*T targets of logsumexp(logits) - logits[target]

The MoE layer (DESIGN.md, "The MoE layer's arithmetic"; core/model/moe.c),
over the N = B*T tokens of the batch:
  z = x Wr (E logits; no bias), p = softmax(z)
  each token's top_k experts by p, ties to the lower index; combine weights
  w_i = p_i / sum of the chosen p; y = sum_i w_i expert_i(x), each expert a
  GELU MLP like the dense one (c_fc [C, F], c_proj [F, C], with biases)
  aux    = aux_coeff E sum_e f_e P_e,  f_e = (assignments to e) / (N top_k),
           P_e = (1/N) sum_tokens p_e        (Switch Transformer)
  z_loss = z_coeff (1/N) sum_tokens logsumexp(z)^2   (ST-MoE)
The reported aux_loss and z_loss include their coefficients and are summed
over the MoE blocks; "loss" is the LM loss alone. tessera computes the two per
micro-batch and averages them over the step's micro-batches (Megatron-LM's
choice): with micro_batch < global_batch on one rank pass --micro-batch to do
the same (the z-loss is unchanged by it, the aux loss is not; with data
parallelism a micro-batch's group is that of every rank, not modelled here).
No capacity limit is modelled ([model] capacity_factor = 0: no row dropped).

A top-k choice decided by probabilities closer than f32 can resolve is
reported on stderr: there tessera's choice may differ from this one's.
"""
import argparse
import json
import math
import struct
import sys
from array import array
from operator import mul

TOKENS_MAGIC, TOKENS_VERSION = 20240520, 1
LN_EPS = 1e-5
GELU_K = math.sqrt(2.0 / math.pi)
SHAPE_KEYS = ("layers", "d_model", "vocab", "context", "experts", "moe_every",
              "expert_hidden", "top_k", "heads")


def die(msg):
    sys.exit("st_reference.py: " + msg)


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------

def read_safetensors(path):
    """{name: (shape, flat list of floats)}, and the metadata (str: str)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack_from("<Q", raw, 0)
    if 8 + n > len(raw):
        die("%s: header length %d does not fit the file" % (path, n))
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    data = memoryview(raw)[8 + n:]
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        count = math.prod(e["shape"])
        blob = data[begin:end]
        if e["dtype"] == "F32":
            vals = array("f")
            vals.frombytes(blob)
        elif e["dtype"] == "BF16":  # the top 16 bits of an f32
            half = array("H")
            half.frombytes(blob)
            if sys.byteorder != "little":
                half.byteswap()
            vals = array("f")
            vals.frombytes(array("I", (h << 16 for h in half)).tobytes())
        elif e["dtype"] == "F16":
            vals = struct.unpack("<%de" % count, blob)
        else:
            die("%s: %s has dtype %s (F32, BF16 or F16 expected)" % (path, name, e["dtype"]))
        if e["dtype"] == "F32" and sys.byteorder != "little":
            vals.byteswap()
        if len(vals) != count:
            die("%s: %s holds %d values, its shape %s says %d" % (path, name, len(vals),
                                                                  e["shape"], count))
        tensors[name] = (list(e["shape"]), [float(v) for v in vals])
    return tensors, meta


def read_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    head = struct.unpack_from("<256i", raw, 0)
    if head[0] != TOKENS_MAGIC or head[1] != TOKENS_VERSION:
        die("%s: not an llm.c token file (magic %d, version %d)" % (path, head[0], head[1]))
    n = head[2]
    if len(raw) != 1024 + 2 * n:
        die("%s: %d tokens declared, %d bytes of them" % (path, n, len(raw) - 1024))
    return list(struct.unpack_from("<%dH" % n, raw, 1024))


def batch_windows(tokens, B, T):
    """Inputs and targets of windows 0 .. B-1, each B*T long, row b*T + t."""
    nwin = (len(tokens) - 1) // T
    if nwin < 1:
        die("the token file holds no whole window of %d" % T)
    inputs, targets = [], []
    for w in range(B):
        s = (w % nwin) * T
        inputs += tokens[s:s + T]
        targets += tokens[s + 1:s + T + 1]
    return inputs, targets


# ---------------------------------------------------------------------------
# The configuration: metadata, tensors and command line, which must agree
# ---------------------------------------------------------------------------

def resolve_config(tensors, meta, args):
    def shape(name):
        if name not in tensors:
            die("%s: no tensor %s" % (args.weights, name))
        return tensors[name][0]

    V, C = shape("wte.weight")
    cfg = {"vocab": V, "d_model": C, "context": shape("wpe.weight")[0]}
    cfg["layers"] = 1 + max(int(k.split(".")[1]) for k in tensors if k.startswith("h."))
    moe = [l for l in range(cfg["layers"]) if "h.%d.mlp.router.weight" % l in tensors]
    cfg["experts"] = shape("h.%d.mlp.router.weight" % moe[0])[1] if moe else 0
    if moe:
        cfg["expert_hidden"] = shape("h.%d.mlp.experts.0.c_fc.weight" % moe[0])[1]
        cfg["moe_every"] = moe[1] - moe[0] if len(moe) > 1 else cfg["layers"]
    for key, value in (("heads", args.heads), ("top_k", args.top_k)):
        if value is not None:
            cfg[key] = value
    for key in SHAPE_KEYS:
        if key in meta:
            v = int(meta[key])
            # moe_every is not visible in the tensors of a one-MoE-block model
            if key in cfg and cfg[key] != v and not (key == "moe_every" and len(moe) == 1):
                die("%s: __metadata__ says %s = %d, the tensors or the command line %d"
                    % (args.weights, key, v, cfg[key]))
            cfg[key] = v
    if "heads" not in cfg:
        die("no heads: neither in the file's __metadata__ nor --heads")
    cfg.setdefault("top_k", 2)  # tessera's [model] top_k default
    if cfg["experts"] and moe != [l for l in range(cfg["layers"]) if l % cfg["moe_every"] == 0]:
        die("MoE blocks %s are not every %d-th block" % (moe, cfg["moe_every"]))
    for key, value, default in (("aux_loss_coeff", args.aux_coeff, 0.0),
                                ("z_loss_coeff", args.z_coeff, 0.0)):
        cfg[key] = value if value is not None else float(meta.get(key, default))
    if C % cfg["heads"]:
        die("d_model = %d is not divisible by heads = %d" % (C, cfg["heads"]))
    if cfg["experts"] and not 1 <= cfg["top_k"] <= cfg["experts"]:
        die("top_k = %d with %d experts" % (cfg["top_k"], cfg["experts"]))
    cfg["moe_layers"] = moe
    return cfg


# ---------------------------------------------------------------------------
# Layers, on lists of rows of floats (doubles)
# ---------------------------------------------------------------------------

def columns(t):
    """The columns of a 2-D [in, out] tensor: out lists of in values."""
    (_, out), flat = t
    return [flat[j::out] for j in range(out)]


def linear(xs, cols, bias=None):
    """Rows x W (+ b), W given by its columns."""
    if bias is None:
        return [[sum(map(mul, x, c)) for c in cols] for x in xs]
    return [[sum(map(mul, x, c)) + b for c, b in zip(cols, bias)] for x in xs]


def layernorm(xs, weight, bias):
    out = []
    for x in xs:
        m = sum(x) / len(x)
        var = sum((v - m) * (v - m) for v in x) / len(x)
        r = 1.0 / math.sqrt(var + LN_EPS)
        out.append([(v - m) * r * w + b for v, w, b in zip(x, weight, bias)])
    return out


def gelu(v):
    return 0.5 * v * (1.0 + math.tanh(GELU_K * (v + 0.044715 * v * v * v)))


def add(xs, ys):
    return [[a + b for a, b in zip(x, y)] for x, y in zip(xs, ys)]


def softmax_lse(z):
    mx = max(z)
    ex = [math.exp(v - mx) for v in z]
    s = sum(ex)
    return [e / s for e in ex], mx + math.log(s)


def attention(qkv, B, T, C, NH):
    """Causal self-attention of (B*T, 3C) rows to (B*T, C)."""
    hs = C // NH
    scale = 1.0 / math.sqrt(hs)
    out = [[0.0] * C for _ in range(B * T)]
    for b in range(B):
        rows = qkv[b * T:(b + 1) * T]
        for h in range(NH):
            q0, k0, v0 = h * hs, C + h * hs, 2 * C + h * hs
            ks = [r[k0:k0 + hs] for r in rows]
            vs = [r[v0:v0 + hs] for r in rows]
            for t in range(T):
                q = rows[t][q0:q0 + hs]
                a, _ = softmax_lse([sum(map(mul, q, k)) * scale for k in ks[:t + 1]])
                o = out[b * T + t]
                for i in range(hs):
                    o[q0 + i] = sum(a[u] * vs[u][i] for u in range(t + 1))
    return out


def mlp(xs, fc, fc_bias, proj, proj_bias):
    h = [[gelu(v) for v in row] for row in linear(xs, fc, fc_bias)]
    return linear(h, proj, proj_bias)


def moe(xs, W, l, cfg, groups):
    """The MoE block l on rows xs: its output rows, aux loss and z-loss
    (coefficients included; each averaged over the `groups` micro-batches
    as tessera does, DESIGN.md's formulas within each)."""
    E, k = cfg["experts"], cfg["top_k"]
    pre = "h.%d.mlp." % l
    router = columns(W[pre + "router.weight"])
    experts = [(columns(W[pre + "experts.%d.c_fc.weight" % e]),
                W[pre + "experts.%d.c_fc.bias" % e][1],
                columns(W[pre + "experts.%d.c_proj.weight" % e]),
                W[pre + "experts.%d.c_proj.bias" % e][1]) for e in range(E)]
    N = len(xs)
    probs, lses, choices = [], [], []
    for t, z in enumerate(linear(xs, router)):
        p, lse = softmax_lse(z)
        order = sorted(range(E), key=lambda e: (-p[e], e))  # ties to the lower index
        if k < E and p[order[k - 1]] - p[order[k]] < 1e-6:
            print("st_reference.py: block %d token %d: top-%d choice by a margin of %.2g "
                  "(p %s); tessera's f32 may choose otherwise"
                  % (l, t, k, p[order[k - 1]] - p[order[k]], [round(v, 8) for v in p]),
                  file=sys.stderr)
        probs.append(p)
        lses.append(lse)
        choices.append(order[:k])
    # Each expert on the rows routed to it, combined with renormalised weights.
    out = [[0.0] * len(xs[0]) for _ in range(N)]
    for e, (fc, fcb, proj, projb) in enumerate(experts):
        rows = [t for t in range(N) if e in choices[t]]
        if not rows:
            continue
        ys = mlp([xs[t] for t in rows], fc, fcb, proj, projb)
        for t, y in zip(rows, ys):
            w = probs[t][e] / sum(probs[t][c] for c in choices[t])
            out[t] = [o + w * v for o, v in zip(out[t], y)]
    # The losses, per micro-batch of n tokens, averaged over them.
    aux = zl = 0.0
    n = N // groups
    for g in range(groups):
        ts = range(g * n, (g + 1) * n)
        f = [sum(e in choices[t] for t in ts) / (n * k) for e in range(E)]
        P = [sum(probs[t][e] for t in ts) / n for e in range(E)]
        aux += cfg["aux_loss_coeff"] * E * sum(fe * pe for fe, pe in zip(f, P)) / groups
        zl += cfg["z_loss_coeff"] * sum(lses[t] ** 2 for t in ts) / n / groups
    return out, aux, zl


# ---------------------------------------------------------------------------
# The step
# ---------------------------------------------------------------------------

def first_step(W, cfg, inputs, targets, B, T, groups):
    C, V, NH = cfg["d_model"], cfg["vocab"], cfg["heads"]
    wte = W["wte.weight"][1]
    wpe = W["wpe.weight"][1]
    x = [[wte[tok * C + c] + wpe[(i % T) * C + c] for c in range(C)]
         for i, tok in enumerate(inputs)]
    aux = zl = 0.0
    for l in range(cfg["layers"]):
        p = "h.%d." % l
        h = layernorm(x, W[p + "ln_1.weight"][1], W[p + "ln_1.bias"][1])
        qkv = linear(h, columns(W[p + "attn.c_attn.weight"]), W[p + "attn.c_attn.bias"][1])
        a = attention(qkv, B, T, C, NH)
        x = add(x, linear(a, columns(W[p + "attn.c_proj.weight"]), W[p + "attn.c_proj.bias"][1]))
        h = layernorm(x, W[p + "ln_2.weight"][1], W[p + "ln_2.bias"][1])
        if l in cfg["moe_layers"]:
            y, la, lz = moe(h, W, l, cfg, groups)
            aux += la
            zl += lz
        else:
            y = mlp(h, columns(W[p + "mlp.c_fc.weight"]), W[p + "mlp.c_fc.bias"][1],
                    columns(W[p + "mlp.c_proj.weight"]), W[p + "mlp.c_proj.bias"][1])
        x = add(x, y)
    x = layernorm(x, W["ln_f.weight"][1], W["ln_f.bias"][1])
    head = [wte[v * C:(v + 1) * C] for v in range(V)]  # tied: logits = x wte^T
    loss = 0.0
    for row, tgt in zip(linear(x, head), targets):
        _, lse = softmax_lse(row)
        loss += lse - row[tgt]
    return loss / len(targets), aux, zl


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", required=True, help="safetensors file")
    ap.add_argument("--tokens", required=True, help="llm.c token file")
    ap.add_argument("--batch", type=int, required=True, help="[train] global_batch")
    ap.add_argument("--seq", type=int, required=True, help="[train] seq_len")
    ap.add_argument("--micro-batch", type=int, help="[train] micro_batch of a one-rank run: the aux losses are averaged "
                    "over its micro-batches as tessera does (default: --batch)")
    ap.add_argument("--heads", type=int, help="[model] heads, if not in the file's metadata")
    ap.add_argument("--top-k", type=int, help="[model] top_k, if not in the metadata (else 2)")
    ap.add_argument("--aux-coeff", type=float, help="[model] aux_loss_coeff (default 0)")
    ap.add_argument("--z-coeff", type=float, help="[model] z_loss_coeff (default 0)")
    args = ap.parse_args()
    W, meta = read_safetensors(args.weights)
    cfg = resolve_config(W, meta, args)
    B, T = args.batch, args.seq
    mb = args.micro_batch or B
    if B % mb:
        die("--micro-batch %d does not divide --batch %d" % (mb, B))
    if T > cfg["context"]:
        die("--seq %d is longer than the context %d" % (T, cfg["context"]))
    inputs, targets = batch_windows(read_tokens(args.tokens), B, T)
    if max(inputs + targets) >= cfg["vocab"]:
        die("a token id >= vocab = %d" % cfg["vocab"])
    loss, aux, zl = first_step(W, cfg, inputs, targets, B, T, B // mb)
    print(json.dumps({"loss": loss, "aux_loss": aux, "z_loss": zl}))


if __name__ == "__main__":
    main()
