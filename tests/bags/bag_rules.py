"""The arithmetic of torch's CPU embedding_bag, written out in numpy, one rounding at a time.

generate.py asserts that these functions reproduce every bit torch returns for the committed cases,
and that the plausible alternatives (another summation order, a separate multiply and add, a
reciprocal instead of a division, another rounding of the 16-bit output) do not. README.md states
the rules with that evidence; this file is the executable form a C++ port can be read against.

Two code paths exist in torch 2.x (aten/src/ATen/native/EmbeddingBag.cpp), and they round
differently:
- "fbgemm": no padding_idx (and contiguous rows): FBGEMM's JIT EmbeddingSpMDM kernel. Weighted sum is
  one fused multiply-add per index (vfmadd231ps); bf16 output is rounded half-up on the bit pattern
  (add 0x8000, keep the upper 16 bits), f16 output to nearest even (vcvtps2ph, imm 8).
- "loop": padding_idx given (and max, always): ATen's own loop. Weighted sum is a product rounded to f32, then an add;
  16-bit output is rounded to nearest even (c10::Half / c10::BFloat16 conversions).
Both accumulate in f32, left to right in index order, starting from +0.0.
"""
import numpy as np

F32, F64 = np.float32, np.float64


# ---------------------------------------------------------------------------------------------
# 16-bit formats as bit patterns (uint16), converted from and to f32 exactly as torch does.

def from_bits(bits, dtype):
    """Table or output bits -> f32 values (exact: f16 and bf16 are subsets of f32)."""
    if dtype == "f32":
        return np.asarray(bits, np.uint32).view(F32)
    if dtype == "f16":
        return np.asarray(bits, np.uint16).view(np.float16).astype(F32)
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(F32)


def f16_rne(x):
    return np.asarray(x, F32).astype(np.float16).view(np.uint16)  # numpy rounds to nearest even


def bf16_rne(x):
    u = np.asarray(x, F32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(np.asarray(x, F32)), np.uint16(0x7FC0), rounded)  # c10::BFloat16's NaN


def bf16_half_up(x):
    """FBGEMM's fp32 -> bf16: add 1 << 15 to the bit pattern, keep the upper half (ties away from zero)."""
    u = np.asarray(x, F32).view(np.uint32).astype(np.uint64)
    return (((u + 0x8000) & 0xFFFFFFFF) >> 16).astype(np.uint16)


def to_out(acc, dtype, path):
    """The f32 accumulator -> output bits of the table dtype."""
    if dtype == "f32":
        return np.asarray(acc, F32).view(np.uint32)
    if dtype == "f16":
        return f16_rne(acc)
    return bf16_half_up(acc) if path == "fbgemm" else bf16_rne(acc)


# ---------------------------------------------------------------------------------------------
# f32 fused multiply-add, exactly rounded, without math.fma (Python < 3.13): the product of two
# f32 values is exact in f64, TwoSum gives the exact error of the f64 sum, and the one case where
# rounding f64 then f32 differs from rounding once (the f64 sum lands on an f32 midpoint) is
# settled by the sign of that error.

def fma_f32(w, x, acc):
    p = np.asarray(w, F64) * np.asarray(x, F64)
    a = np.asarray(acc, F64)
    s = p + a
    bv = s - p
    err = (p - (s - bv)) + (a - bv)
    r = s.astype(F32)
    r64 = r.astype(F64)
    towards = np.where(s > r64, np.inf, -np.inf).astype(F32)
    other = np.nextafter(r, towards).astype(F64)
    tie = (s != r64) & (np.abs(s - r64) == np.abs(other - r64) / 2) & (err != 0)
    fixed = np.where(err > 0, np.maximum(r64, other), np.minimum(r64, other)).astype(F32)
    return np.where(tie, fixed, r)


def mul_add_f32(w, x, acc):
    return (np.asarray(acc, F32) + (np.asarray(w, F32) * np.asarray(x, F32)).astype(F32)).astype(F32)


# ---------------------------------------------------------------------------------------------
# One embedding_bag call.

def bag_bounds(n_indices, offsets, include_last_offset):
    bounds = list(offsets) if include_last_offset else list(offsets) + [n_indices]
    return list(zip(bounds[:-1], bounds[1:]))


def path_of(padding_idx, mode):
    """torch's code path: max is always ATen's own loop; sum and mean take FBGEMM without padding_idx."""
    return "fbgemm" if padding_idx is None and mode != "max" else "loop"


def embedding_bag(table_bits, dtype, mode, indices, offsets, include_last_offset=False, weights=None,
                  padding_idx=None, order="forward", fused=None, mean_rounding="torch", out_rounding=None):
    """Output bits [bags, dim]. The keyword arguments after padding_idx select the ALTERNATIVE rules the
    evidence counts (order "reverse"/"pairwise"/"f64", fused True/False, mean "reciprocal"/"once",
    out_rounding "rne"/"half_up"); their defaults are torch's rules."""
    table = from_bits(table_bits, dtype)
    path = path_of(padding_idx, mode)
    fused = (path == "fbgemm") if fused is None else fused
    w = None if weights is None else np.asarray(weights, F64).astype(F32)
    dim = table.shape[1]
    outs = []
    for lo, hi in bag_bounds(len(indices), offsets, include_last_offset):
        picks = [k for k in range(lo, hi) if indices[k] != padding_idx]
        if mode == "max":  # the element itself is copied: its bits, NaN payloads and -0.0 included
            if not picks:
                outs.append(np.zeros(dim, np.uint32 if dtype == "f32" else np.uint16))
                continue
            best = np.full(dim, indices[picks[0]])
            for k in picks[1:]:
                row = table[indices[k]]
                best = np.where(row > table[best, np.arange(dim)], indices[k], best)  # strict >: a NaN never wins later
            outs.append(np.asarray(table_bits)[best, np.arange(dim)])
            continue
        acc = accumulate(table, indices, picks, w, order, fused)
        if out_rounding is None:
            bits = to_out(acc, dtype, path)
        else:
            bits = to_out(acc, dtype, "fbgemm" if out_rounding == "half_up" else "loop")
        if mode == "mean":
            n = F32(max(len(picks), 1))
            if mean_rounding == "once" and dtype != "f32":  # f32 sum / n rounded once (not torch)
                bits = to_out(acc / n, dtype, path)
            elif mean_rounding == "reciprocal":
                bits = to_out(from_bits(bits, dtype) * (F32(1) / n), dtype, "loop")
            else:  # torch: the output tensor (already in the table dtype) divided in f32, rounded to nearest even
                bits = to_out((from_bits(bits, dtype) / n).astype(F32), dtype, "loop")
        outs.append(bits)
    kind = np.uint32 if dtype == "f32" else np.uint16
    return np.array(outs, kind).reshape(len(outs), dim)


def accumulate(table, indices, picks, w, order, fused):
    dim = table.shape[1]
    if order == "f64":
        total = np.zeros(dim, F64)
        for k in picks:
            total += table[indices[k]].astype(F64) * (1.0 if w is None else F64(w[k]))
        return total.astype(F32)
    seq = list(reversed(picks)) if order == "reverse" else picks
    if order == "pairwise":
        terms = [table[indices[k]] if w is None else (w[k] * table[indices[k]]).astype(F32) for k in seq]
        while len(terms) > 1:
            terms = [(terms[i] + terms[i + 1]).astype(F32) if i + 1 < len(terms) else terms[i]
                     for i in range(0, len(terms), 2)]
        return terms[0] if terms else np.zeros(dim, F32)
    acc = np.zeros(dim, F32)  # +0.0: a bag of one -0.0 row sums to +0.0
    for k in seq:
        row = table[indices[k]]
        if w is None:
            acc = (acc + row).astype(F32)
        else:
            acc = fma_f32(w[k], row, acc) if fused else mul_add_f32(w[k], row, acc)
    return acc
