"""How model2vec's StaticModel.encode pools, written out as explicit loops, one rounding at a time.

generate.py asserts that encode() here reproduces every bit StaticModel.encode returned for the
committed sentences, and alternatives() counts the sentences on which plausible other rules differ.
README.md states the rules with that evidence. The numpy calls model2vec makes (model.py,
StaticModel._encode_batch) and what they do, as established here:

- ids: model.tokenize(sentences) after encode has cut each sentence to max_length *
  median_token_length characters and set the tokenizer's truncation to max_length tokens;
  special tokens are not added; the unk id is removed after truncation.
- no weights, no token_mapping: embedding[ids].mean(axis) over an f16 table = an f32 sum in token
  order from +0.0 (numpy reduces a non-contiguous axis element by element), divided by the count in
  f32, rounded to f16.
- weights and/or token_mapping: embedding[token_mapping[ids]] * weights[ids] is promoted to the
  weights' dtype (f64 here), summed in token order in that dtype, divided by the count, and
  rounded straight to the table dtype (f16).
- no ids: a row of zeros.
- normalize: x = f32(row); the squared norm sum(x * x) in numpy's pairwise order (a contiguous
  axis: eight strided partial sums from 8 elements on), sqrt in f32, plus f32(1e-32), x / that in
  f32, rounded to f16.
"""
import numpy as np

F16, F32, F64 = np.float16, np.float32, np.float64


def tokenize_as_encode(model, sentences, max_length):
    """The ids StaticModel.encode pools: its own character cut, truncation and tokenize()."""
    if max_length is not None:
        cut = max_length * model.median_token_length
        sentences = [s[:cut] for s in sentences]
    model._set_max_length_in_tokenizer(max_length)
    try:
        return model.tokenize(sentences)
    finally:
        model._set_max_length_in_tokenizer(model.max_length)


def numpy_add_reduce(v):
    """np.add.reduce of a contiguous 1-D array (numpy 2.x): numpy's pairwise sum of all of it."""
    return pairwise(v)


def pairwise(a):
    """numpy's pairwise summation (umath loops, PW_BLOCKSIZE 128): sequential below 8 elements, eight
    strided partial sums combined as a tree up to 128, halves (rounded down to a multiple of 8) above."""
    t = a.dtype.type
    n = len(a)
    if n < 8:
        res = t(0)
        for x in a:
            res = t(res + x)
        return res
    if n <= 128:
        r = [t(x) for x in a[:8]]
        i = 8
        while i < n - (n % 8):
            r = [t(r[j] + a[i + j]) for j in range(8)]
            i += 8
        res = t(t(t(r[0] + r[1]) + t(r[2] + r[3])) + t(t(r[4] + r[5]) + t(r[6] + r[7])))
        for x in a[i:]:
            res = t(res + x)
        return res
    half = n // 2
    half -= half % 8
    return t(pairwise(a[:half]) + pairwise(a[half:]))


def pool(embedding, weights, token_mapping, ids):
    """One sentence's mean, in the table dtype."""
    dim = embedding.shape[1]
    if not ids:
        return np.zeros(dim, embedding.dtype)
    if weights is None and token_mapping is None:
        acc = np.zeros(dim, F32)
        for i in ids:
            acc = (acc + embedding[i].astype(F32)).astype(F32)
        return (acc / F32(len(ids))).astype(F32).astype(embedding.dtype)
    rows = [i if token_mapping is None else token_mapping[i] for i in ids]
    kind = np.result_type(embedding.dtype, F32 if weights is None else weights.dtype)
    terms = [embedding[r].astype(kind) * (kind.type(1) if weights is None else kind.type(weights[i]))
             for r, i in zip(rows, ids)]
    acc = np.zeros(dim, kind)
    for t in terms:
        acc = (acc + t).astype(kind)
    return (acc / kind.type(len(ids))).astype(kind).astype(embedding.dtype)


def normalize(row):
    x = row.astype(F32)
    norm = F32(np.sqrt(numpy_add_reduce((x * x).astype(F32)), dtype=F32)) + F32(1e-32)
    return (x / F32(norm)).astype(F32).astype(row.dtype)


def encode(embedding, weights, token_mapping, ids_per_sentence, do_normalize):
    out = np.stack([pool(embedding, weights, token_mapping, ids) for ids in ids_per_sentence])
    if do_normalize:
        out = np.stack([normalize(r) for r in out])
    return out


# ---------------------------------------------------------------------------------------------
# Plausible other rules, each of which must differ from StaticModel.encode somewhere in the cases.

def _alt_pool_f64_once(embedding, weights, token_mapping, ids):
    if not ids:
        return np.zeros(embedding.shape[1], embedding.dtype)
    rows = [i if token_mapping is None else token_mapping[i] for i in ids]
    w = [1.0 if weights is None else float(weights[i]) for i in ids]
    return (sum(embedding[r].astype(F64) * wi for r, wi in zip(rows, w)) / len(ids)).astype(embedding.dtype)


def _alt_normalize_f64(row):
    x = row.astype(F64)
    return (x / (np.sqrt((x * x).sum()) + 1e-32)).astype(row.dtype)


def _alt_normalize_sequential(row):
    x = row.astype(F32)
    ss = F32(0)
    for v in (x * x).astype(F32):
        ss = F32(ss + v)
    return (x / (F32(np.sqrt(ss, dtype=F32)) + F32(1e-32))).astype(F32).astype(row.dtype)


def _alt_normalize_unrounded_mean(embedding, weights, token_mapping, ids):
    """Normalizing the mean before it is rounded to the table dtype (f32 mean, not f16)."""
    if not ids:
        return np.zeros(embedding.shape[1], embedding.dtype)
    rows = [i if token_mapping is None else token_mapping[i] for i in ids]
    w = [F32(1) if weights is None else F32(weights[i]) for i in ids]
    acc = embedding[rows[0]].astype(F32) * w[0]
    for r, wi in zip(rows[1:], w[1:]):
        acc = (acc + embedding[r].astype(F32) * wi).astype(F32)
    mean = (acc / F32(len(ids))).astype(F32)
    return (mean / (F32(np.sqrt(numpy_add_reduce((mean * mean).astype(F32)))) + F32(1e-32))).astype(embedding.dtype)


def alternatives(model, sentences):
    """{rule: {"sentences_checked", "sentences_that_differ"}} over both truncation settings."""
    emb, w, tm = model.embedding, model.weights, model.token_mapping
    counts = {}

    def count(name, fn):
        c = counts.setdefault(name, {"sentences_checked": 0, "sentences_that_differ": 0, "max_f16_ulps": 0})
        for max_length in (model.max_length, 8):
            for ids in tokenize_as_encode(model, sentences, max_length):
                ref = encode(emb, w, tm, [ids], model.normalize)[0]
                got = fn(ids)
                c["sentences_checked"] += 1
                c["sentences_that_differ"] += int(not np.array_equal(got.view(np.uint16), ref.view(np.uint16)))
                c["max_f16_ulps"] = max(c["max_f16_ulps"], f16_ulps(got, ref))

    count("mean in f64, rounded once", lambda ids: normalize(_alt_pool_f64_once(emb, w, tm, ids)))
    count("norm in f64", lambda ids: _alt_normalize_f64(pool(emb, w, tm, ids)))
    count("squared norm summed left to right", lambda ids: _alt_normalize_sequential(pool(emb, w, tm, ids)))
    count("mean not rounded to f16 before normalizing", lambda ids: _alt_normalize_unrounded_mean(emb, w, tm, ids))
    if w is not None or tm is not None:  # what folding the weights into a per-id table would give
        folded32 = (emb[tm if tm is not None else np.arange(len(w))].astype(F64) *
                    (w if w is not None else 1.0)[:, None]).astype(F32)
        count("weights folded into an f32 per-id table, f32 mean",
              lambda ids: normalize(pool(folded32, None, None, ids).astype(F16)))
        folded16 = folded32.astype(F16)
        count("weights folded into an f16 per-id table, f32 mean", lambda ids: normalize(pool(folded16, None, None, ids)))
        count("f32(weights) as bag weights: f32 fused multiply-add, / n in f32",
              lambda ids: normalize(_weighted_f32(emb, w, tm, ids)))
    return counts


def _weighted_f32(embedding, weights, token_mapping, ids):
    """A weighted mean as a pooling kernel with f32 weights would do it (torch's fbgemm rule, then / n)."""
    import bag_rules
    acc = np.zeros(embedding.shape[1], F32)
    for i in ids:
        row = embedding[i if token_mapping is None else token_mapping[i]].astype(F32)
        acc = bag_rules.fma_f32(F32(1) if weights is None else F32(weights[i]), row, acc)
    return (acc / F32(max(len(ids), 1))).astype(F32).astype(embedding.dtype)


def f16_ulps(a, b):
    """Largest distance in f16 ulps (ordered bit patterns, across zero)."""
    def ordered(x):
        bits = x.astype(F16).view(np.uint16).astype(np.int64)
        return np.where(bits & 0x8000, 0x8000 - bits, bits + 0x8000)
    return int(np.abs(ordered(a) - ordered(b)).max()) if len(a) else 0
