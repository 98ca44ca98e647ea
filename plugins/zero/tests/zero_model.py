# zero_model.py — the test model's parameters (tests/cli/multirank.sh's
# write_config: 2 layers, C = 64, vocabulary 256, context 64) with the shapes
# GPT-2 declares them in (core/model/gpt2.c, model order), and the rules zero
# follows: the dimension it cuts a parameter along over dp, and the uneven
# split (ts_comm_block_range). Shared by the zero suite's memory and
# communication checks.
C, L, V, T = 64, 2, 256, 64


def params():
    out = [("wte", (V, C)), ("wpe", (T, C))]
    for l in range(L):
        h = "h.%d." % l
        out += [(h + "ln1.weight", (C,)), (h + "ln1.bias", (C,)),
                (h + "attn.qkv.weight", (3, C, C)), (h + "attn.qkv.bias", (3, C)),
                (h + "attn.proj.weight", (C, C)), (h + "attn.proj.bias", (C,)),
                (h + "ln2.weight", (C,)), (h + "ln2.bias", (C,)),
                (h + "mlp.fc.weight", (4 * C, C)), (h + "mlp.fc.bias", (4 * C,)),
                (h + "mlp.proj.weight", (C, 4 * C)), (h + "mlp.proj.bias", (C,))]
    return out + [("lnf.weight", (C,)), ("lnf.bias", (C,))]


def modules():
    """(name, parameter names) in model order; the head reads the tied wte."""
    ps = [n for n, _ in params()]
    mods = [("embedding", ["wte", "wpe"])]
    for l in range(L):
        mods.append(("h.%d" % l, [n for n in ps if n.startswith("h.%d." % l)]))
    return mods + [("head", ["lnf.weight", "lnf.bias", "wte"])]


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def block_range(total, parts, part):
    base, extra = divmod(total, parts)
    return part * base + min(part, extra), base + (1 if part < extra else 0)


def shard_dim(shape, dp):
    for d, s in enumerate(shape):
        if s % dp == 0 and s >= dp:
            return d
    return max(range(len(shape)), key=lambda d: (shape[d], -d))


def block(shape, dp, r):
    """Elements of rank r's block of a parameter cut over dp."""
    d = shard_dim(shape, dp)
    return numel(shape) // shape[d] * block_range(shape[d], dp, r)[1]


P = sum(numel(s) for _, s in params())
