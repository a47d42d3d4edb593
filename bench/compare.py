"""embedrt beside every real peer and each case's honest roofline, measured in one run.

Peers (from PyPI, in the venv tools/setup-bench-venv.sh makes): torch 2.x as tutorials write it
(`tok(ids) + pos(arange)`), at its best (`index_select(out=)` + `add_`), in bf16; torch's
`F.embedding_bag` (mode sum, one id per bag) and `quantized.embedding_bag_byte_rowwise_offsets`,
which run FBGEMM's gather kernels; ONNX Runtime's Gather + Add and its fused
`com.microsoft.EmbedLayerNormalization` (BERT). The roofline of a case (`embedrt bench
--roofline`) streams exactly the bytes the case moves, in order, over buffers 4x the last-level
cache: no gather of those rows can beat it.

Groups beyond the gathers: `gemma3n` (issue 13: Gemma 3n E2B and E4B's two tables at full size,
both outputs in one call, against torch doing the same two lookups, and a cold per-layer row with
and without Embedder::prefetch), `bags` (issue 15: pooled bags against torch's embedding_bag,
FBGEMM's int8 bag and model2vec's numpy pooling, beside the bag roofline), and an int4 table in
the gpt2 group (issue 12.5). `--name` writes a partial run beside the full one (e.g. bags.md).

Every case runs R rounds; in each round every contender of the case takes one sample (the median
tokens/s of calls over --seconds), so the shared machine's noise hits all alike; the report gives
medians of the R samples and ratios between medians; the goals of issues 12 and 15 against a peer
are judged round by round too, and met only if the median of those agrees (round_ratios). Every
contender of a case rotates through the same number of random id sets (Case.id_sets): enough that
the distinct rows they touch are 4x the LLC (98% of the rows of a smaller table), so narrow rows
do not stay cached between calls; output buffers rotate too, until together they are 4x the LLC (except in the cases labelled
cache-resident, which keep 8 id sets and one buffer). Every table, output and touched-rows size is
reported against the LLC the benchmark detected, and the regime follows from what is touched.

usage: ./tools/setup-bench-venv.sh --run bench/compare.py build/release/tools/embedrt [options]
       python3 bench/compare.py build/release/tools/embedrt --smoke --out DIR   (embedrt alone, seconds)
"""
import argparse
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

def draw(json_path, png_path):
    """One panel per group of cases (horizontal bars: % of each case's roofline, every contender
    the case has), the panels packed into two columns; colours are the same in every panel."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(json_path) as f:
        result = json.load(f)
    top = max(result["meta"]["threads"])
    groups = {}
    for c in result["cases"]:
        if c["threads"] == top:
            groups.setdefault(c["group"], []).append(c)
    if not groups:
        return
    names = ("embedrt",) + EMBEDRT_VARIANTS + PLOTTED
    # (tab20 then tab20b: more than 20 contenders, each its own colour)
    colours = {n: plt.get_cmap("tab20")(k) if k < 20 else plt.get_cmap("tab20b")(k - 20) for k, n in enumerate(names)}

    def bars(c):
        return [n for n in names if c["medians"].get(n)]

    def height(group):  # in bar heights: the bars, a gap after each case, the panel's title and axis
        return sum(len(bars(c)) + 1 for c in groups[group]) + 6

    columns = [[], []] if len(groups) > 1 else [[]]
    for g in sorted(groups, key=height, reverse=True):  # the tallest groups first, each to the shorter column
        min(columns, key=lambda col: sum(map(height, col))).append(g)
    order = list(groups)
    columns = [sorted(col, key=order.index) for col in columns if col]
    tallest = max(sum(map(height, col)) for col in columns)
    used = [n for n in names if any(c["medians"].get(n) for cs in groups.values() for c in cs)]
    # Legend columns of about 4.5 inches (the longest names, "embedrt mean, normalized, one output
    # buffer", took more than a quarter of a one-column figure's 9 and were cut off at its edges).
    legend_columns = min(2 * len(columns), len(used))
    head = 0.5 + 0.2 * math.ceil(len(used) / legend_columns)  # inches: the title and the legend
    fig = plt.figure(figsize=(9 * len(columns), head + 0.13 * tallest), layout="constrained")
    top_part, body = fig.subfigures(2, 1, height_ratios=[head, 0.13 * tallest])
    top_part.suptitle(f"embedrt and peers against each case's streaming roofline ({top} thread{'s' if top > 1 else ''}, "
                      f"{result['meta']['isa']}); solid line: 100%, dashed: the 90% goal", fontsize=10)
    top_part.legend(handles=[matplotlib.patches.Patch(color=colours[n], label=n) for n in used], loc="lower center",
                    ncol=legend_columns, fontsize=8, frameon=False)
    for sub, col in zip(body.subfigures(1, len(columns), squeeze=False)[0], columns):
        ratios = [height(g) for g in col]
        if sum(ratios) < tallest:
            ratios.append(tallest - sum(ratios))  # blank, so every column's bars are equally thick
        axes = sub.subplots(len(ratios), 1, gridspec_kw={"height_ratios": ratios}, squeeze=False)[:, 0]
        for ax in axes[len(col):]:
            ax.axis("off")
        for ax, g in zip(axes, col):
            y, ticks, labels = 0.0, [], []
            peak = 100
            for c in groups[g]:
                present = bars(c)
                for n in present:
                    v = 100 * c["medians"][n] / roofline_for(c["medians"], n)
                    peak = max(peak, v)
                    ax.barh(y, v, 0.85, color=colours[n])
                    ax.text(v + 0.5, y, f"{v:.0f}", va="center", fontsize=5.5)
                    y += 1
                ticks.append(y - (len(present) + 1) / 2)
                # Wrapped: the longest titles ("model2vec's size, bags of 8: ... -> f32", 80
                # characters) took half of a one-column figure's width from its bars.
                labels.append(textwrap.fill(c["title"], 44))
                y += 1
            ax.set_yticks(ticks, labels, fontsize=7)
            ax.set_ylim(y - 0.5, -1)  # the first case on top
            ax.set_xlim(0, 1.08 * peak)
            ax.axvline(100, color="black", linewidth=0.8)
            ax.axvline(90, color="black", linewidth=0.8, linestyle="--")
            ax.tick_params(axis="x", labelsize=7)
            ax.set_title(f"{g} ({len(groups[g])} case{'s' if len(groups[g]) > 1 else ''})", fontsize=9, loc="left")
        axes[len(col) - 1].set_xlabel("% of the case's roofline (tokens/s)", fontsize=8)
    fig.savefig(png_path, dpi=110)


# Contenders drawn besides embedrt, in this order (also the report's peers).
TOKENIZER = "model2vec's tokenizer alone (not a pooling)"  # static cases: the step before the pooling, reported apart
PLOTTED = ("torch tutorial", "torch best", "torch bf16 tutorial", "torch bf16 best", "torch embedding_bag (FBGEMM)",
           "torch int8 rowwise bag (FBGEMM)", "torch BERT module", "ONNX Runtime Gather+Add",
           "ONNX Runtime EmbedLayerNormalization", "torch 2 lookups tutorial", "torch 2 lookups best",
           "torch embedding_bag sum", "torch embedding_bag mean", "torch embedding_bag f16 sum",
           "torch int8 rowwise bag sum (FBGEMM)", "model2vec pooling (numpy)", TOKENIZER)
# Contenders of a case that are embedrt in another mode (bags: mean and normalized; into one
# output buffer, as the peers that allocate their output per call get it back), not peers.
EMBEDRT_VARIANTS = ("embedrt mean, normalized", "embedrt, one output buffer", "embedrt mean, normalized, one output buffer")
# Peers that allocate their output on every call. The allocator hands back the block they freed,
# still cached, so their output hardly reaches DRAM while embedrt's rotates through 4x the LLC:
# on equal terms they are compared with embedrt into one output buffer, where the case measured it.
# A bag's output is a large share of its bytes (bags of 8 from an int8 dim-256 table: 1 KiB of f32
# written per 2 KiB of rows read), so the bags group measures that too.
ALLOCATING_PEERS = ("torch tutorial", "torch bf16 tutorial", "torch embedding_bag (FBGEMM)",
                    "torch int8 rowwise bag (FBGEMM)", "torch embedding_bag sum", "torch embedding_bag mean",
                    "torch embedding_bag f16 sum", "torch int8 rowwise bag sum (FBGEMM)", "model2vec pooling (numpy)")
# Their output cached, such a peer ran past the roofline, whose outputs rotate (the Zen 5 of
# bench/results/bags-zen5c-b47bfd7: FBGEMM's f16 256 bags of 8 at 108% of it; a probe of the
# roofline after, 1 thread: 70.5 M rows/s into one buffer, 59.9 M rotating): where a case measures the roofline
# into one output buffer as well, such a peer and embedrt into one buffer are judged against that,
# or against the rotating one where that ran faster (a small output is cached either way, and a
# limit is the most the machine reached: summary()).
ONE_BUFFER_ROOFLINE = "roofline, one output buffer"


def roofline_for(medians, contender):
    """The roofline a contender's % is of: for a peer that allocates its output and for embedrt
    into one buffer, the faster of the case's rooflines into one buffer (where measured) and
    rotating; for every other contender the rotating one."""
    one = contender in ALLOCATING_PEERS or contender.endswith("one output buffer")
    return max(medians["roofline"], medians.get(ONE_BUFFER_ROOFLINE) or 0) if one else medians["roofline"]


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--plot":  # plot() with another Python
    draw(sys.argv[2], sys.argv[3])
    sys.exit(0)

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("cli", help="the embedrt binary")
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--seconds", type=float, default=0.3, help="time per sample")
parser.add_argument("--threads", default=None, help="comma-separated thread counts (default: 1 and every core)")
parser.add_argument("--groups", default="gpt2,bert,llama,gemma,small,cached,decode,residency,gemma3n,bags",
                    help="which groups of cases to run (gemma3n: both variants, or gemma3n-e2b / gemma3n-e4b)")
parser.add_argument("--name", default="compare", help="the report's file names: NAME.md, NAME.json, NAME.png")
parser.add_argument("--quick", action="store_true", help="GPT-2 and decode only, 3 rounds")
parser.add_argument("--bag-shapes", default=None,
                    help="the bags group's shapes to run, as BAGxDIMxDTYPE,... (e.g. 32x768xint8,32x768xf16; BAG divides "
                         "1024; default: bags of 8, 32 and 128 at dims 64, 256 and 768 from f32, f16 and int8, 27 cases "
                         "on 9 tables 4x the LLC, run one table at a time; --smoke "
                         "keeps its own tiny shapes)")
parser.add_argument("--smoke", action="store_true",
                    help="embedrt only (no torch or ONNX Runtime), tiny shapes, one short round: checks the script")
parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
parser.add_argument("--work", default=None, help="where generated models go (default: a temporary folder)")
parser.add_argument("--from-json", default=None, help="measure nothing: write the report of an earlier run's compare.json")
parser.add_argument("--prefetch-level", choices=("auto", "l1", "l2"), default="auto",
                    help="embedrt's rows of tables past half the LLC prefetched into L1 or L2, or as the machine's "
                         "calibration chooses (the default; docs/BENCHMARKS.md: choosing the prefetch level)")
parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: per call, the process's CPU time divided by its threads instead of wall time. On a busy "
                         "machine a long call waits for other processes' time slices and a short one mostly does not; "
                         "CPU time leaves the waiting out (memory stalls stay in). Thread pools are told not to spin "
                         "(OMP_WAIT_POLICY=PASSIVE, ONNX Runtime allow_spinning=0), which would count as CPU time; "
                         "use it with --threads 1: with more, a worker that sleeps while another works makes CPU time per "
                         "thread under-count (a 2-thread stream read 2.5x its 1-thread rate). Single-token latencies stay "
                         "on the wall clock")
args = parser.parse_args()
if args.quick:
    args.groups, args.rounds = "gpt2,decode", min(args.rounds, 3)
if args.smoke:
    args.rounds, args.seconds = 1, 0.02
SMALL_DIMS = (64, 128, 256, 384)
CORES = os.cpu_count()
THREADS = [int(t) for t in args.threads.split(",")] if args.threads else sorted({1, CORES})
if args.clock == "cpu":
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # before torch starts its OpenMP threads
    if max(THREADS) > 1:
        print("compare.py: --clock cpu under-counts multi-threaded calls (see --help); prefer --threads 1",
              file=sys.stderr)
# Id sets a case rotates through: see Case.id_sets. Cache-resident cases keep a small rotation.
ID_SETS_MIN = 8
ID_SETS_TOUCH = 4        # x the LLC: the distinct rows a rotation should touch, in the table's bytes
ID_SETS_COVERAGE = 0.98  # of a table's rows: past it more sets mostly repeat rows already touched
ID_SETS_MAX_BYTES = 256 << 20  # of int64 ids per case (embedrt bench allocates them per run)
DRAM_TOUCHED = 3.5       # x the LLC of rows touched for the regime `dram` (a table 4x the LLC, fully covered, is)

if not args.smoke and not args.from_json:
    import numpy as np
    import onnxruntime as ort
    import torch
    from onnx import TensorProto, helper, numpy_helper


# ---------------------------------------------------------------------------------------------
# embedrt, through its CLI


def bench(*extra):
    r = subprocess.run([args.cli, "bench", "--json", "--prefetch-level", args.prefetch_level, *map(str, extra)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"embedrt bench {' '.join(map(str, extra))}: {r.stderr.strip()}")
    return json.loads(r.stdout)


class Model:
    """A generated model (`embedrt bench --synthetic`), written once into the work folder."""

    def __init__(self, name, vocab, dim, dtype, positions=0, segments=0, layer_norm=False, token_scale=1.0, shape_flags=None):
        self.path = os.path.join(WORK, name + ".embt")
        self.flags = (shape_flags or ["--synthetic", f"{vocab}x{dim}", "--dtype", dtype]) + ["--synthetic-file", self.path]
        if positions:
            self.flags += ["--positions", positions]
        if segments:
            self.flags += ["--segments", segments]
        if layer_norm:
            self.flags += ["--layer-norm"]
        if token_scale != 1.0:
            self.flags += ["--token-scale", token_scale]
        self.vocab, self.dim, self.dtype = vocab, dim, dtype
        bench(*self.flags, "--batch", 1, "--seq", 1, "--seconds", 0.01)  # writes it

    def warm(self):
        """Reads the file through the page cache (so a warm first request is one), untimed."""
        with open(self.path, "rb") as f:
            while f.read(64 << 20):
                pass

    def remove(self):
        if os.path.exists(self.path):
            os.unlink(self.path)


LAST = {}  # the last JSON report of each embedrt contender: sizes, regime, residency
RATE = "cpu_tokens_per_second" if args.clock == "cpu" else "tokens_per_second"  # embedrt bench's fields
# Single-token latencies always by the wall clock: calls of a few hundred ns, timed in groups of
# ~20 us, are rarely preempted, and the median keeps the undisturbed groups; measured per process
# CPU time, they read 4x the wall-clock figure on a busy VM (cache refills after every switch and
# steal time counted as running).
LATENCY = "latency_seconds"


def embedrt_sampler(key, model, batch, seq, threads, out, out_sets, id_sets, *extra, residency="populate"):
    def sample():
        doc = bench(*model.flags, "--batch", batch, "--seq", seq, "--threads", threads, "--out-dtype", out,
                    "--out-sets", out_sets, "--id-sets", id_sets, "--seconds", args.seconds, "--residency", residency, *extra)
        LAST[key] = doc
        return doc[RATE]
    return sample


def roofline_sampler(key, dtype, dim, tokens, threads, out, out_sets, *extra, shape_flags=None):
    shape = shape_flags or ["--synthetic", f"1x{dim}", "--dtype", dtype]

    def sample():
        doc = bench(*shape, "--roofline", "--batch", 1, "--seq", tokens,
                    "--threads", threads, "--out-dtype", out, "--out-sets", out_sets, "--seconds", args.seconds, *extra)
        LAST[key] = doc
        return doc[RATE]
    return sample


def measure_one_buffer(c, embedrt, roofline):
    """embedrt and the roofline into one output buffer too: the condition of a peer that allocates
    its output per call (ALLOCATING_PEERS), compared on equal terms (equal_terms, roofline_for)."""
    c.contenders["embedrt, one output buffer"] = embedrt
    c.contenders[ONE_BUFFER_ROOFLINE] = roofline


# ---------------------------------------------------------------------------------------------
# Peers


def timed(fn, tokens, threads=1, wall=False):
    """Median tokens/s of fn() over --seconds, timed in groups of calls lasting >= 20 us (by the
    wall clock, or with --clock cpu and not `wall`: the process's CPU time divided by `threads`)."""
    cpu = args.clock == "cpu" and not wall
    clock = time.process_time if cpu else time.perf_counter
    scale = threads if cpu else 1
    fn()
    per = 1
    while True:
        start = time.perf_counter()
        for _ in range(per):
            fn()
        if time.perf_counter() - start > 2e-5 or per > 1 << 16:
            break
        per *= 2
    samples, deadline = [], time.perf_counter() + args.seconds
    while len(samples) < 5 or time.perf_counter() < deadline:
        start = clock()
        for _ in range(per):
            fn()
        samples.append((clock() - start) / per / scale)
    return tokens / max(statistics.median(samples), 1e-12)


class Rotation:
    """Hands out items in turn (id sets, output buffers)."""

    def __init__(self, items):
        self.items, self.k = items, 0

    def __call__(self):
        self.k += 1
        return self.items[self.k % len(self.items)]


ID_TENSORS = {}  # (vocab, ids per call, sets) -> the group's id sets, shared by every peer and case that draws them


def random_ids(vocab, shape, count):
    """`count` random id batches of `shape` from [0, vocab), in turn. Cases of a group that draw
    the same number of ids from the same vocabulary share the tensors (a bag case's sizes and
    thread counts), which keeps a group's ids at one copy per table."""
    key = (vocab, math.prod(shape), count)
    if key not in ID_TENSORS:
        ID_TENSORS[key] = [torch.randint(0, vocab, (key[1],)) for _ in range(count)]
    return Rotation([t.view(shape) for t in ID_TENSORS[key]])


def out_buffers(n, shape, dtype):
    return Rotation([torch.empty(shape, dtype=dtype) for _ in range(n)])


def torch_sampler(fn, tokens, threads):
    def sample():
        torch.set_num_threads(threads)
        with torch.inference_mode():
            return timed(fn, tokens, threads)
    return sample


def ort_session(model, threads):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if args.clock == "cpu":
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def ort_sampler(session, inputs, output, outs, tokens, threads, extra_outputs=()):
    """ONNX Runtime at its best: inputs and the output bound once per call to preallocated numpy
    buffers (IOBinding), so it never allocates the result."""
    binding = session.io_binding()
    for name in extra_outputs:
        binding.bind_output(name, "cpu")

    def call():
        for name, rotation in inputs.items():
            binding.bind_cpu_input(name, rotation())
        buf = outs()
        binding.bind_output(output, "cpu", 0, buf.dtype, list(buf.shape), buf.ctypes.data)
        session.run_with_iobinding(binding)

    return lambda: timed(call, tokens, threads)


def gather_add_model(table, positions):
    """ONNX: Gather(table, ids) + positions[:L] (broadcast over the batch)."""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"]), helper.make_node("Add", ["rows", "pos"], ["out"])]
    inits = [numpy_helper.from_array(table, "table")]
    if positions is not None:
        inits.append(numpy_helper.from_array(positions, "pos"))
    else:
        nodes = nodes[:1]
        nodes[0].output[0] = "out"
    graph = helper.make_graph(nodes, "gather_add", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "L"])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["B", "L", table.shape[1]])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def embed_layer_norm_model(word, position, segment, gamma, beta):
    node = helper.make_node("EmbedLayerNormalization", ["ids", "seg", "word", "pos", "segemb", "gamma", "beta"],
                            ["out", "mask_index"], domain="com.microsoft", epsilon=1e-12)
    inits = [numpy_helper.from_array(a, n) for a, n in ((word, "word"), (position, "pos"), (segment, "segemb"),
                                                         (gamma, "gamma"), (beta, "beta"))]
    graph = helper.make_graph([node], "eln", [helper.make_tensor_value_info("ids", TensorProto.INT32, ["B", "L"]),
                                              helper.make_tensor_value_info("seg", TensorProto.INT32, ["B", "L"])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["B", "L", word.shape[1]]),
                               helper.make_tensor_value_info("mask_index", TensorProto.INT32, ["B"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


# ---------------------------------------------------------------------------------------------
# Cases

OUT_BYTES = {"f32": 4, "bf16": 2, "f16": 2}


def row_stride(dtype, dim):
    """A table row's bytes in the .embt file (rows padded to 64 bytes): the cache lines a gather of
    the row brings in. Gemma 3n's two tables are one row of their summed width (both widths are
    multiples of 32 bf16 values, so neither pads)."""
    def up(n, k):
        return -(-n // k) * k
    payload = {"f32": 4 * dim, "f16": 2 * dim, "bf16": 2 * dim, "int8": up(dim, 4) + 8, "int4": up(up(dim, 2) // 2, 4) + 4}[dtype]
    return up(payload, 64)


def rows_touched(vocab, draws):
    """The distinct rows that `draws` uniformly random ids from [0, vocab) touch, on average."""
    return vocab * -math.expm1(draws * math.log1p(-1 / vocab)) if vocab > 1 else min(vocab, draws)


def id_sets_for(vocab, row_bytes, ids_per_call):
    """Id sets to rotate through so that the rows they touch together are ID_SETS_TOUCH x the LLC
    (or, for a table smaller than that, ID_SETS_COVERAGE of its rows), whatever the row width: a
    fixed 8 sets of 8192 ids touch 16 MiB of 256-byte rows, which stay in a 32 MiB LLC between
    calls, so a 'dram' case measured a mostly cached gather. At least ID_SETS_MIN, at most
    ID_SETS_MAX_BYTES of int64 ids."""
    want = min(ID_SETS_TOUCH * LLC / row_bytes, ID_SETS_COVERAGE * vocab)
    draws = math.log1p(-want / vocab) / math.log1p(-1 / vocab) if vocab > 1 else 0  # rows_touched's inverse
    cap = max(ID_SETS_MIN, ID_SETS_MAX_BYTES // (8 * ids_per_call))
    return min(cap, max(ID_SETS_MIN, math.ceil(draws / ids_per_call)))


def regime(touched_bytes, output_bytes):
    """dram: the rows a rotation touches are DRAM_TOUCHED x the LLC and the outputs 2x; cache: both
    fit in it together; mixed otherwise. From what the calls touch, not from the table's size: a
    large table read through a few small id sets is a cached case."""
    if touched_bytes >= DRAM_TOUCHED * LLC and output_bytes >= 2 * LLC:
        return "dram"
    return "cache" if touched_bytes + output_bytes <= LLC else "mixed"


class Case:
    """One row of the report: a shape, dtypes, tokens per call and threads, with its contenders."""

    def __init__(self, group, title, threads, tokens, vocab, dim, table, out, cached=False, bag=1):
        self.group, self.title, self.threads, self.tokens, self.dim = group, title, threads, tokens, dim
        self.vocab, self.table, self.out, self.cached, self.bag = vocab, table, out, cached, bag
        self.key = f"{title} | {threads}t"
        self.contenders = {}  # name -> sample function
        self.samples = {}

    def out_sets(self):
        """Output buffers to rotate: together 4x the LLC, unless the case is the cache-resident kind."""
        if self.cached:
            return 1
        return min(1024, max(1, math.ceil(4 * LLC / (self.tokens // self.bag * self.dim * OUT_BYTES[self.out]))))

    def id_sets(self):
        """Id batches every contender of the case rotates through (embedrt's --id-sets, the peers'
        tensors and lists): the one source of that count. A cache-resident case keeps 8 on purpose."""
        if self.cached:
            return ID_SETS_MIN
        return id_sets_for(self.vocab, row_stride(self.table, self.dim), self.tokens)

    def touched_bytes(self):
        """The table bytes (whole rows) the case's id rotation touches, on average."""
        return rows_touched(self.vocab, self.id_sets() * self.tokens) * row_stride(self.table, self.dim)


def gpt2_group(threads_list):
    B, L, V, D = 8, 1024, 50257, 768
    if args.smoke:
        B, L, V, D = 2, 64, 5000, 64
    models = {d: Model(f"gpt2-{d}", V, D, d, positions=1024) for d in ("f32", "bf16", "f16", "int8", "int4")}
    cases = []
    if not args.smoke:
        W = torch.randn(V, D) * 0.02
        P = torch.randn(1024, D) * 0.01
        Wb, Pb = W.bfloat16(), P.bfloat16()
        W8 = torch.ops.quantized.embedding_bag_byte_prepack(W)
        tok, pos = torch.nn.Embedding.from_pretrained(W), torch.nn.Embedding.from_pretrained(P)
        onnx_model = gather_add_model(W.numpy(), P[:L].numpy())
    for t in threads_list:
        for table, out in (("f32", "f32"), ("bf16", "f32"), ("f16", "f32"), ("int8", "f32"), ("int4", "f32"), ("f32", "bf16"),
                           ("bf16", "bf16")):
            c = Case("gpt2", f"GPT-2 {V}x{D}, {B}x{L}, {table} -> {out}", t, B * L, V, D, table, out)
            c.contenders["embedrt"] = embedrt_sampler(c.key, models[table], B, L, t, out, c.out_sets(), c.id_sets())
            if (table, out) in (("f32", "f32"), ("int8", "f32")):
                # The cases with an FBGEMM peer, also into one buffer: the condition its allocator
                # gives it (see small_group). Where the table fits in the LLC, the rotating outputs
                # are the only DRAM traffic left, and this is the like-for-like comparison.
                measure_one_buffer(c, embedrt_sampler(c.key + " one buffer", models[table], B, L, t, out, 1, c.id_sets()),
                                   roofline_sampler(c.key + " roofline one buffer", table, D, B * L, t, out, 1))
            c.contenders["roofline"] = roofline_sampler(c.key + " roofline", table, D, B * L, t, out, c.out_sets())
            if not args.smoke:
                ids = random_ids(V, (B, L), c.id_sets())
                if (table, out) == ("f32", "f32"):
                    outs = out_buffers(c.out_sets(), (B * L, D), torch.float32)

                    def tutorial(ids=ids):
                        return tok(ids()) + pos(torch.arange(L))

                    def best(ids=ids, outs=outs):
                        buf = outs()
                        torch.index_select(W, 0, ids().view(-1), out=buf)
                        buf.view(B, L, D).add_(P[:L])

                    flat = random_ids(V, (B * L,), c.id_sets())
                    offsets = torch.arange(B * L)

                    def bag(flat=flat):
                        return torch.nn.functional.embedding_bag(flat(), W, offsets, mode="sum")

                    np_ids = Rotation([i.numpy() for i in ids.items])
                    np_outs = Rotation([np.empty((B, L, D), np.float32) for _ in range(c.out_sets())])
                    c.contenders["torch tutorial"] = torch_sampler(tutorial, B * L, t)
                    c.contenders["torch best"] = torch_sampler(best, B * L, t)
                    c.contenders["torch embedding_bag (FBGEMM)"] = torch_sampler(bag, B * L, t)
                    c.contenders["ONNX Runtime Gather+Add"] = ort_sampler(ort_session(onnx_model, t), {"ids": np_ids}, "out",
                                                                          np_outs, B * L, t)
                if (table, out) == ("int8", "f32"):
                    flat = random_ids(V, (B * L,), c.id_sets())
                    offsets = torch.arange(B * L)

                    def bag8(flat=flat):
                        return torch.ops.quantized.embedding_bag_byte_rowwise_offsets(W8, flat(), offsets, False, 0, False,
                                                                                      None, None, False)

                    c.contenders["torch int8 rowwise bag (FBGEMM)"] = torch_sampler(bag8, B * L, t)
                if (table, out) == ("bf16", "bf16"):
                    outs = out_buffers(c.out_sets(), (B * L, D), torch.bfloat16)

                    def best_bf16(ids=ids, outs=outs):
                        buf = outs()
                        torch.index_select(Wb, 0, ids().view(-1), out=buf)
                        buf.view(B, L, D).add_(Pb[:L])

                    c.contenders["torch bf16 best"] = torch_sampler(best_bf16, B * L, t)
            cases.append(c)
    return cases, list(models.values())


class BertEmbeddings(torch.nn.Module if "torch" in globals() else object):
    """Hugging Face's BertEmbeddings.forward (absolute positions), line for line."""

    def __init__(self, vocab, context, types, dim):
        super().__init__()
        self.word_embeddings = torch.nn.Embedding(vocab, dim)
        self.position_embeddings = torch.nn.Embedding(context, dim)
        self.token_type_embeddings = torch.nn.Embedding(types, dim)
        self.LayerNorm = torch.nn.LayerNorm(dim, eps=1e-12)
        self.dropout = torch.nn.Dropout(0.1)

    def forward(self, input_ids, token_type_ids, position_ids):
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings += self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


def bert_group(threads_list):
    B, L, V, D = 8, 512, 30522, 768
    if args.smoke:
        B, L, V, D = 2, 64, 3000, 64
    model = Model("bert-f32", V, D, "f32", positions=512, segments=2, layer_norm=True)
    cases = []
    if not args.smoke:
        bert = BertEmbeddings(V, 512, 2, D).eval()
        sd = {k: v.detach().numpy() for k, v in bert.state_dict().items()}
        onnx_model = embed_layer_norm_model(sd["word_embeddings.weight"], sd["position_embeddings.weight"],
                                            sd["token_type_embeddings.weight"], sd["LayerNorm.weight"], sd["LayerNorm.bias"])
    for t in threads_list:
        c = Case("bert", f"BERT-base {V}x{D} + LayerNorm, {B}x{L}, f32 -> f32", t, B * L, V, D, "f32", "f32")
        c.contenders["embedrt"] = embedrt_sampler(c.key, model, B, L, t, "f32", c.out_sets(), c.id_sets())
        c.contenders["roofline"] = roofline_sampler(c.key + " roofline", "f32", D, B * L, t, "f32", c.out_sets())
        if not args.smoke:
            ids = random_ids(V, (B, L), c.id_sets())
            types, positions = torch.zeros(B, L, dtype=torch.long), torch.arange(L).unsqueeze(0)
            c.contenders["torch BERT module"] = torch_sampler(lambda ids=ids: bert(ids(), types, positions), B * L, t)
            np_ids = Rotation([i.numpy().astype(np.int32) for i in ids.items])
            seg = Rotation([np.zeros((B, L), np.int32)])
            np_outs = Rotation([np.empty((B, L, D), np.float32) for _ in range(c.out_sets())])
            c.contenders["ONNX Runtime EmbedLayerNormalization"] = ort_sampler(
                ort_session(onnx_model, t), {"ids": np_ids, "seg": seg}, "out", np_outs, B * L, t,
                extra_outputs=("mask_index",))
        cases.append(c)
    return cases, [model]


def big_group(threads_list, name, V, D, dtypes, B, L, token_scale=1.0):
    """Llama-3 and Gemma-3 shapes: a plain gather (Gemma: times sqrt(hidden)), no positions."""
    if args.smoke:
        V, D, B, L = 4000, 256, 2, 64
    models = {d: Model(f"{name.lower()}-{d}", V, D, d, token_scale=token_scale) for d in {t for t, _ in dtypes}}
    tables = {}
    if not args.smoke:
        if "f32" in models:
            tables["f32"] = torch.empty(V, D).normal_(0, 0.02)
        if "bf16" in models:
            tables["bf16"] = tables["f32"].bfloat16() if "f32" in tables else torch.empty(V, D, dtype=torch.bfloat16).normal_(0, 0.02)
    cases = []
    for t in threads_list:
        for table, out in dtypes:
            c = Case(name.lower(), f"{name} {V}x{D}, {B}x{L}, {table} -> {out}", t, B * L, V, D, table, out)
            c.contenders["embedrt"] = embedrt_sampler(c.key, models[table], B, L, t, out, c.out_sets(), c.id_sets())
            if table == out:  # torch's nn.Embedding allocates its output per call: see ALLOCATING_PEERS
                measure_one_buffer(c, embedrt_sampler(c.key + " one buffer", models[table], B, L, t, out, 1, c.id_sets()),
                                   roofline_sampler(c.key + " roofline one buffer", table, D, B * L, t, out, 1))
            c.contenders["roofline"] = roofline_sampler(c.key + " roofline", table, D, B * L, t, out, c.out_sets())
            if not args.smoke and table == out:
                W = tables[table]
                ids = random_ids(V, (B, L), c.id_sets())
                outs = out_buffers(c.out_sets(), (B * L, D), W.dtype)
                emb = torch.nn.Embedding.from_pretrained(W)
                scale = torch.tensor(token_scale, dtype=W.dtype)
                label = "torch" if table == "f32" else f"torch {table}"
                if token_scale != 1.0:  # Gemma's scaled embedding, as transformers computes it
                    def tutorial(ids=ids, emb=emb):
                        return emb(ids()) * scale

                    def best(ids=ids, outs=outs, W=W):
                        buf = outs()
                        torch.index_select(W, 0, ids().view(-1), out=buf)
                        buf.mul_(scale)
                else:
                    def tutorial(ids=ids, emb=emb):
                        return emb(ids())

                    def best(ids=ids, outs=outs, W=W):
                        torch.index_select(W, 0, ids().view(-1), out=outs())
                c.contenders[f"{label} tutorial"] = torch_sampler(tutorial, B * L, t)
                c.contenders[f"{label} best"] = torch_sampler(best, B * L, t)
                if table == "f32":
                    flat, offsets = random_ids(V, (B * L,), c.id_sets()), torch.arange(B * L)
                    c.contenders["torch embedding_bag (FBGEMM)"] = torch_sampler(
                        lambda flat=flat, W=W: torch.nn.functional.embedding_bag(flat(), W, offsets, mode="sum"), B * L, t)
            cases.append(c)
    return cases, list(models.values())


def small_group(threads_list, dims):
    """Small widths over f32 tables 4x the LLC: rows of 256 B to 1.5 KiB, latency-bound gathers."""
    B, L = (8, 1024) if not args.smoke else (2, 64)
    cases, models = [], []
    for D in dims:
        V = 4 * LLC // (4 * D) + 1 if not args.smoke else 5000
        model = Model(f"small-{D}", V, D, "f32")
        models.append(model)
        W = torch.randn(V, D) * 0.02 if not args.smoke else None
        for t in threads_list:
            c = Case("small", f"dim {D}: {V}x{D}, {B}x{L}, f32 -> f32", t, B * L, V, D, "f32", "f32")
            c.contenders["embedrt"] = embedrt_sampler(c.key, model, B, L, t, "f32", c.out_sets(), c.id_sets())
            # FBGEMM's embedding_bag allocates its output, and the allocator hands back the buffer it
            # freed the call before, still cached; embedrt's outputs rotate through 4x the LLC. The
            # same table and ids into one buffer show what that difference is worth.
            measure_one_buffer(c, embedrt_sampler(c.key + " one buffer", model, B, L, t, "f32", 1, c.id_sets()),
                               roofline_sampler(c.key + " roofline one buffer", "f32", D, B * L, t, "f32", 1))
            c.contenders["roofline"] = roofline_sampler(c.key + " roofline", "f32", D, B * L, t, "f32", c.out_sets())
            if not args.smoke:
                ids, outs = random_ids(V, (B * L,), c.id_sets()), out_buffers(c.out_sets(), (B * L, D), torch.float32)
                offsets = torch.arange(B * L)
                c.contenders["torch best"] = torch_sampler(
                    lambda ids=ids, outs=outs, W=W: torch.index_select(W, 0, ids(), out=outs()), B * L, t)
                c.contenders["torch embedding_bag (FBGEMM)"] = torch_sampler(
                    lambda ids=ids, W=W: torch.nn.functional.embedding_bag(ids(), W, offsets, mode="sum"), B * L, t)
            cases.append(c)
    return cases, models


def cached_group(threads_list):
    """A cache-resident case, for contrast: an 8 MiB f32 table and a 1.5 MiB output, one buffer."""
    V, D, B, L = 2730, 768, 1, 512
    model = Model("cached-f32", V, D, "f32", positions=1024)
    cases = []
    for t in threads_list:
        c = Case("cached", f"cache-resident {V}x{D}, {B}x{L}, f32 -> f32", t, B * L, V, D, "f32", "f32", cached=True)
        c.contenders["embedrt"] = embedrt_sampler(c.key, model, B, L, t, "f32", 1, c.id_sets())
        c.contenders["roofline"] = roofline_sampler(c.key + " roofline", "f32", D, B * L, t, "f32", 1)
        cases.append(c)
    return cases, [model]


# ---------------------------------------------------------------------------------------------
# Decode and residency: latencies, interleaved the same way


def decode_group():
    """Single tokens: warm (8 ids that stay cached), cold (row and output evicted, beside the
    physical limit), and random rows of a multi-GB table (DRAM and TLB misses), mmap vs copy."""
    gpt2 = Model("decode-gpt2-f32", *((50257, 768) if not args.smoke else (5000, 64)), "f32", positions=1024)
    V, D = (262144, 5376) if not args.smoke else (20000, 256)
    gemma = Model("decode-gemma-bf16", V, D, "bf16", token_scale=73.5)
    rows = {}

    def embedrt_ns(key, model, *extra):
        def sample():
            doc = bench(*model.flags, "--batch", 1, "--seq", 1, "--threads", 1, "--seconds", args.seconds, *extra)
            LAST[key] = doc
            return doc[LATENCY]["p50"] * 1e9
        return sample

    def cold_ns(key):
        def sample():
            doc = bench(*gpt2.flags, "--batch", 1, "--seq", 1, "--threads", 1, "--seconds", args.seconds, "--evict",
                        "--residency", "populate")
            LAST[key] = doc
            return doc["embedrt_ns"]["p50"]
        return sample

    rows["warm, GPT-2 f32 (8 ids, cached)"] = {"embedrt": embedrt_ns("warm", gpt2, "--residency", "populate")}
    rows["cold, GPT-2 f32 (row and output evicted)"] = {
        "embedrt": cold_ns("cold"), "physical limit": lambda: LAST["cold"]["limit_ns"]["p50"]}
    for residency in ("populate", "copy"):
        rows[f"random rows of Gemma-3 {V}x{D} bf16 ({residency})"] = {
            "embedrt": embedrt_ns(f"random-{residency}", gemma, "--id-sets", 65536, "--residency", residency)}
    if not args.smoke:
        W, P = torch.randn(gpt2.vocab, gpt2.dim) * 0.02, torch.randn(1024, gpt2.dim) * 0.01
        tok, pos = torch.nn.Embedding.from_pretrained(W), torch.nn.Embedding.from_pretrained(P)
        ids = Rotation([torch.tensor([[i]]) for i in (464, 2068, 7586, 21831, 18045, 625, 262, 16931)])
        buf = torch.empty(1, gpt2.dim)

        def best():
            torch.index_select(W, 0, ids().view(-1), out=buf)
            buf.add_(P[:1])

        def ns(fn):
            def sample():
                torch.set_num_threads(1)
                with torch.inference_mode():
                    return 1e9 / timed(fn, 1, wall=True)  # as LATENCY
            return sample

        rows["warm, GPT-2 f32 (8 ids, cached)"]["torch best"] = ns(best)
        rows["warm, GPT-2 f32 (8 ids, cached)"]["torch tutorial"] = ns(lambda: tok(ids()) + pos(torch.arange(1)))
        Wg = torch.empty(V, D, dtype=torch.bfloat16).normal_(0, 0.02)
        rids = Rotation([torch.randint(0, V, (1,)) for _ in range(65536)])
        gbuf = torch.empty(1, D, dtype=torch.bfloat16)
        scale = torch.tensor(73.5, dtype=torch.bfloat16)

        def gemma_best():
            torch.index_select(Wg, 0, rids(), out=gbuf)
            gbuf.mul_(scale)

        rows[f"random rows of Gemma-3 {V}x{D} bf16 (populate)"]["torch bf16 best"] = ns(gemma_best)
    return rows, [gpt2, gemma]


def residency_group():
    """Per residency mode: open time, first call, steady throughput, decode over random rows
    (the TLB's share), resident and huge-page memory. The file is in the page cache (it was just
    used); a --cold-file row drops it first, for the first request from disk."""
    shapes = [("GPT-2 f32", (50257, 768, "f32", 1024), 8, 1024), ("Llama-3 bf16", (128256, 4096, "bf16", 0), 4, 512),
              ("Gemma-3 bf16", (262144, 5376, "bf16", 0), 4, 512)]
    if args.smoke:
        shapes = [("small f32", (4000, 64, "f32", 0), 2, 64)]
    rows, models = {}, []
    for label, (V, D, dtype, positions), B, L in shapes:
        model = Model(f"res-{label.split()[0].lower()}-{dtype}", V, D, dtype, positions=positions)
        models.append(model)
        sets = id_sets_for(V, row_stride(dtype, D), B * L)  # the throughput figure follows the gathers' rule
        for mode in ("mmap", "populate", "copy"):
            for cold in (False, True):
                key = f"{label} | {mode}{' | cold file' if cold else ''}"

                def batch(model=model, mode=mode, cold=cold, B=B, L=L, key=key, sets=sets):
                    if not cold:
                        model.warm()
                    doc = bench(*model.flags, "--batch", B, "--seq", L, "--threads", max(THREADS), "--seconds", args.seconds,
                                "--residency", mode, "--id-sets", sets, *(["--cold-file"] if cold else []))
                    LAST[key] = doc
                    return doc[RATE]

                def decode(model=model, mode=mode, key=key):
                    model.warm()
                    doc = bench(*model.flags, "--batch", 1, "--seq", 1, "--threads", 1, "--seconds", args.seconds,
                                "--residency", mode, "--id-sets", 65536)
                    LAST[key + " decode"] = doc
                    return doc[LATENCY]["p50"] * 1e9

                rows[key] = {"batch": batch} if cold else {"batch": batch, "decode": decode}
    return rows, models


# ---------------------------------------------------------------------------------------------
# Gemma 3n (issue 13): two tables, two outputs, one call

GEMMA3N = {"e2b": (2048, 30), "e4b": (2560, 35)}  # hidden, layers (x 256 per-layer values)


def bf16_round(x):
    return float(torch.tensor(x, dtype=torch.bfloat16)) if "torch" in globals() else x


def gemma3n_group(threads_list, variant):
    """Prefill (1x512) and decode of inputs_embeds and per_layer_inputs together, at full size
    (262400 x hidden and 262144 x layers*256, bf16, random): embedrt's one call against torch doing
    transformers' two lookups (index_select into preallocated outputs, the bf16 scale multiply,
    ids outside the per-layer table mapped to 0) and the roofline of both rows in and both outputs
    out; and a cold per-layer row (15-17.5 KiB) with and without Embedder::prefetch 2 us ahead."""
    H, layers = GEMMA3N[variant]
    V, VP, PD = 262400, 262144, layers * 256
    name = f"Gemma 3n {variant.upper()}"
    per_layer = "per_layer_inputs"
    if args.smoke:  # the same two-output shape, small: --second-output stands in for the per-layer table
        H, V, VP, PD, per_layer = 64, 2624, 2621, 96, "second"
        shape = ["--synthetic", f"{V}x{H}", "--dtype", "bf16", "--second-output", f"{VP}x{PD}", "--token-scale", 8]
    else:
        shape = ["--synthetic-gemma3n", variant]
    model = Model(f"gemma3n-{variant}", V, H + PD, "bf16", shape_flags=shape)
    B, L = 1, 512
    cases, decode = [], {}
    if not args.smoke:
        Wt = torch.empty(V, H, dtype=torch.bfloat16).normal_(0, 0.02)
        Wp = torch.empty(VP, PD, dtype=torch.bfloat16).normal_(0, 0.02)
        st = torch.tensor(bf16_round(math.sqrt(H)), dtype=torch.bfloat16)
        sp = torch.tensor(bf16_round(math.sqrt(256)), dtype=torch.bfloat16)
        tok = torch.nn.Embedding.from_pretrained(Wt)
        plt_emb = torch.nn.Embedding.from_pretrained(Wp)

        def per_layer_ids(ids):  # transformers' Gemma3nTextModel.get_per_layer_inputs
            inside = torch.logical_and(ids >= 0, ids < VP)
            return torch.where(inside, ids, torch.zeros_like(ids))

        def two_lookups(ids, outs):
            ids = ids.view(-1)
            buf_t, buf_p = outs
            torch.index_select(Wt, 0, ids, out=buf_t)
            buf_t.mul_(st)
            torch.index_select(Wp, 0, per_layer_ids(ids), out=buf_p)
            buf_p.mul_(sp)

        def tutorial(ids):
            return tok(ids) * st, (plt_emb(per_layer_ids(ids)) * sp).reshape(*ids.shape, layers, 256)

    for t in threads_list:
        c = Case("gemma3n", f"{name} {V}x{H} + {VP}x{PD}, {B}x{L}, bf16 -> bf16, both outputs", t, B * L, V, H + PD,
                 "bf16", "bf16")
        c.contenders["embedrt"] = embedrt_sampler(c.key, model, B, L, t, "bf16", c.out_sets(), c.id_sets())
        c.contenders["roofline"] = roofline_sampler(c.key + " roofline", "bf16", H, B * L, t, "bf16", c.out_sets(),
                                                    shape_flags=shape)
        if not args.smoke:
            ids = random_ids(V, (B, L), c.id_sets())
            outs = Rotation([(torch.empty(B * L, H, dtype=torch.bfloat16), torch.empty(B * L, PD, dtype=torch.bfloat16))
                             for _ in range(c.out_sets())])
            c.contenders["torch 2 lookups tutorial"] = torch_sampler(lambda ids=ids: tutorial(ids()), B * L, t)
            c.contenders["torch 2 lookups best"] = torch_sampler(lambda ids=ids, outs=outs: two_lookups(ids(), outs()), B * L, t)
        cases.append(c)

    # Decode: one token, both outputs, random ids over the whole tables (DRAM and TLB misses).
    key = f"{name} decode"

    def embedrt_decode():
        doc = bench(*model.flags, "--batch", 1, "--seq", 1, "--threads", 1, "--seconds", args.seconds, "--out-dtype", "bf16",
                    "--id-sets", 65536)
        LAST[key] = doc
        return doc[LATENCY]["p50"] * 1e9

    row = f"{name}: 1 token, both outputs, random ids (populate)"
    decode[row] = {"embedrt": embedrt_decode}
    if not args.smoke:
        rids = Rotation([torch.randint(0, V, (1,)) for _ in range(65536)])
        one = (torch.empty(1, H, dtype=torch.bfloat16), torch.empty(1, PD, dtype=torch.bfloat16))

        def torch_decode():
            torch.set_num_threads(1)
            with torch.inference_mode():
                return 1e9 / timed(lambda: two_lookups(rids(), one), 1, wall=True)

        decode[row]["torch 2 lookups best"] = torch_decode

    # Cold per-layer row: evicted before every call; with Embedder::prefetch 2 or 10 us before the call.
    for ahead in (2, 10):
        cold_key = f"{name} cold {ahead}"

        def cold(cold_key=cold_key, ahead=ahead):
            doc = bench(*model.flags, "--batch", 1, "--seq", 1, "--threads", 1, "--seconds", args.seconds, "--out-dtype", "bf16",
                        "--output", per_layer, "--evict", "--prefetch-ahead", ahead)
            LAST[cold_key] = doc
            return doc["embedrt_ns"]["p50"]

        crow = f"{name}: cold per-layer row ({PD * 2 / 1024:.1f} KiB); prefetch {ahead} us ahead"
        decode[crow] = {"embedrt, row and output evicted": cold,
                        "physical limit (row and output evicted)": lambda k=cold_key: LAST[k]["limit_ns"]["p50"],
                        "embedrt, row evicted, output cached": lambda k=cold_key: LAST[k]["rows_cold_ns"]["p50"],
                        "embedrt, row evicted, output cached, p99": lambda k=cold_key: LAST[k]["rows_cold_ns"]["p99"],
                        f"embedrt, prefetched {ahead} us ahead": lambda k=cold_key: LAST[k]["prefetched_ns"]["p50"],
                        f"embedrt, prefetched {ahead} us ahead, p99": lambda k=cold_key: LAST[k]["prefetched_ns"]["p99"],
                        "the prefetch call itself": lambda k=cold_key: LAST[k]["prefetch_call_ns"]["p50"]}
    return cases, decode, [model]


# ---------------------------------------------------------------------------------------------
# Bags (issue 15): pooled rows, one vector per bag


def table_rows(dtype, D, times):
    """Rows for a table `times` x the LLC in the file's row stride (rows padded to 64 bytes)."""
    return math.ceil(times * LLC / row_stride(dtype, D))


def model2vec_pooler(W):
    """model2vec's StaticModel with its tokenizer left out: `tokenize` hands back the bag's ids, so
    `_encode_batch` (what `encode` runs per batch after tokenizing) does what it does for a model
    without token mapping or weights: the ids to an array per length bucket, the rows gathered,
    their mean, then the L2 normalization (its default config normalizes)."""
    from model2vec import StaticModel
    m = object.__new__(StaticModel)
    m.embedding, m.weights, m.token_mapping = W, None, None
    return m


def model2vec_sampler(pooler, flat, bags, N):
    """model2vec's pooling of `bags` bags of N ids each call, over the case's id sets (`flat`, a
    Rotation of flat tensors), one thread."""
    def sample():
        # The same id sets as Python lists (model2vec's tokenizer output), made for this sample and
        # dropped after it, so one case's lists live at a time: ~48 bytes an id (a dim-64 f16 case:
        # 501 sets, ~190 MiB, ~0.8 s to build, outside the timed calls).
        lists = Rotation([ids.view(bags, N).tolist() for ids in flat.items])
        sentences = [""] * bags

        def m2v():
            ids = lists()
            pooler.tokenize = lambda sentences: ids
            return pooler._encode_batch(sentences, True)
        return timed(m2v, bags * N, 1)
    return sample


BAG_SIZES, BAG_DIMS, BAG_DTYPES = (8, 32, 128), (64, 256, 768), ("f32", "f16", "int8")
BAG_SEQUENCES, BAG_SEQUENCE_IDS = 8, 1024  # a call's ids: sequences x ids, each sequence split into equal bags


def bag_shapes():
    """The bags group's (bag, dim, dtype) shapes: --bag-shapes, else every combination (--smoke:
    its own tiny ones)."""
    if not args.bag_shapes:
        return smoke_bag_shapes() if args.smoke else {(N, D, dtype) for N in BAG_SIZES for D in BAG_DIMS for dtype in BAG_DTYPES}
    shapes = set()
    for text in args.bag_shapes.split(","):
        parts = text.strip().split("x")
        try:
            N, D, dtype = int(parts[0]), int(parts[1]), parts[2]
        except (ValueError, IndexError):
            N = D = dtype = None
        if len(parts) != 3 or dtype not in BAG_DTYPES or D < 1 or N < 1 or BAG_SEQUENCE_IDS % N != 0:
            sys.exit(f"compare.py: --bag-shapes '{text}': expected BAGxDIMxDTYPE with DTYPE one of {', '.join(BAG_DTYPES)} "
                     f"and BAG dividing {BAG_SEQUENCE_IDS}")
        shapes.add((N, D, dtype))
    return smoke_bag_shapes() if args.smoke else shapes  # a malformed one is refused even so


def smoke_bag_shapes():
    return {(N, 64, dtype) for N in (8, 32) for dtype in BAG_DTYPES}


def bag_tables():
    """The bags group's tables, (dim, dtype), in the order they run: one table a group (main())."""
    return sorted({(D, dtype) for _, D, dtype in bag_shapes()}, key=lambda t: (t[0], BAG_DTYPES.index(t[1])))


def bags_group(threads_list, table):
    """Equal bags of 8, 32 and 128 ids (8192 ids a call) from tables 4x the LLC, dims 64, 256, 768,
    f32 / f16 / int8 tables, f32 output: embedrt's pool (sum; mean + normalize for model2vec's
    rule), torch's F.embedding_bag (sum, mean; f16), FBGEMM's int8 rowwise bag, model2vec's numpy
    pooling, and the bag roofline (every row read in order and pooled as the kernel pools, one pooled
    row written per bag); embedrt
    and the roofline also into one output buffer, for the peers that allocate theirs (ALLOCATING_PEERS)."""
    B, L = (BAG_SEQUENCES, BAG_SEQUENCE_IDS) if not args.smoke else (2, 64)
    shapes = {s for s in bag_shapes() if s[1:] == table}
    cases, models = [], []
    for D in sorted({D for _, D, _ in shapes}):
        for dtype in [t for t in BAG_DTYPES if any(s[1:] == (D, t) for s in shapes)]:
            sizes = sorted(N for N, d, t in shapes if (d, t) == (D, dtype))
            V = table_rows(dtype, D, 4) if not args.smoke else 3000
            model = Model(f"bags-{dtype}-{D}", V, D, dtype)
            models.append(model)
            if not args.smoke:
                W = torch.empty(V, D).normal_(0, 0.05)
                W8 = torch.ops.quantized.embedding_bag_byte_prepack(W) if dtype == "int8" else None
                Wh = W.half() if dtype == "f16" else None
                pooler = model2vec_pooler(W.numpy() if dtype == "f32" else Wh.numpy()) if dtype != "int8" else None
                if dtype == "int8":
                    W = None  # only the packed table stays
            for N in sizes:
                for t in threads_list:
                    bags = B * L // N
                    c = Case("bags", f"bags of {N}: {V}x{D} {dtype}, {bags} bags a call, -> f32", t, B * L, V, D, dtype, "f32",
                             bag=N)
                    c.contenders["embedrt"] = embedrt_sampler(c.key, model, B, L, t, "f32", c.out_sets(), c.id_sets(), "--bag", N,
                                                              "--pooling", "sum")
                    c.contenders["roofline"] = roofline_sampler(c.key + " roofline", dtype, D, B * L, t, "f32", c.out_sets(), "--bag", N)
                    # Every peer here allocates its output per call (ALLOCATING_PEERS).
                    measure_one_buffer(c, embedrt_sampler(c.key + " one buffer", model, B, L, t, "f32", 1, c.id_sets(),
                                                          "--bag", N, "--pooling", "sum"),
                                       roofline_sampler(c.key + " roofline one buffer", dtype, D, B * L, t, "f32", 1,
                                                        "--bag", N))
                    if dtype != "int8":
                        for name, key, out_sets in (("embedrt mean, normalized", " mean", c.out_sets()),
                                                    ("embedrt mean, normalized, one output buffer", " mean one buffer", 1)):
                            c.contenders[name] = embedrt_sampler(c.key + key, model, B, L, t, "f32", out_sets, c.id_sets(),
                                                                 "--bag", N, "--pooling", "mean", "--normalize")
                    if not args.smoke:
                        flat = random_ids(V, (B * L,), c.id_sets())
                        offsets = torch.arange(0, B * L, N)
                        if dtype == "f32":
                            c.contenders["torch embedding_bag sum"] = torch_sampler(
                                lambda flat=flat, W=W, o=offsets: torch.nn.functional.embedding_bag(flat(), W, o, mode="sum"), B * L, t)
                            c.contenders["torch embedding_bag mean"] = torch_sampler(
                                lambda flat=flat, W=W, o=offsets: torch.nn.functional.embedding_bag(flat(), W, o, mode="mean"), B * L, t)
                        if dtype == "f16":
                            c.contenders["torch embedding_bag f16 sum"] = torch_sampler(
                                lambda flat=flat, W=Wh, o=offsets: torch.nn.functional.embedding_bag(flat(), W, o, mode="sum"), B * L, t)
                        if dtype == "int8":
                            c.contenders["torch int8 rowwise bag sum (FBGEMM)"] = torch_sampler(
                                lambda flat=flat, W8=W8, o=offsets: torch.ops.quantized.embedding_bag_byte_rowwise_offsets(
                                    W8, flat(), o, False, 0, False, None, None, False), B * L, t)
                        if pooler is not None:
                            c.contenders["model2vec pooling (numpy)"] = model2vec_sampler(pooler, flat, bags, N)
                    cases.append(c)
    return cases, models


# model2vec's own ground: a static model's table is small (potion-base-8M: 29528 x 256), so it
# lives in the LLC, and what a sentence costs is the tokenizer and the per-call work around the rows.
STATIC_VOCAB, STATIC_DIM = 29525, 256  # the vocabulary of tests/bags/model2vec/plain (all-MiniLM-L6-v2's, distilled)
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATIC_MODEL = os.path.join(REPOSITORY, "tests", "bags", "model2vec", "plain")
# Their prose was the README's alone until the benchmark runs moved to docs/BENCHMARKS.md (cc44845):
# the two together are about as long as the README was (19k words).
PROSE_FILES = [os.path.join(REPOSITORY, "README.md"), os.path.join(REPOSITORY, "docs", "BENCHMARKS.md")]


def static_sentences():
    """English sentences to tokenize: the project's prose lines (README.md, then
    docs/BENCHMARKS.md), cut at full stops (code and tables left out)."""
    lines = []
    for path in PROSE_FILES:
        with open(path, encoding="utf-8") as f:
            lines += [line for line in f if line.strip() and line[0] not in "|`#<" and not line.startswith("    ")]
    prose = " ".join(line.strip() for line in lines)
    return [s.strip() + "." for s in prose.split(". ") if len(s.split()) >= 4]


def static_group(threads_list):
    """A static sentence-embedding model's shape (a [29525, 256] f16 table, 14 MiB): embedrt's
    pool with the model's rule (mean, then L2-normalize) against model2vec's numpy pooling, for
    bags of 8, 32 and 128 ids; and model2vec's tokenizer alone on English sentences, the step
    issue 15 asks to report apart from the pooling."""
    B, L = (BAG_SEQUENCES, BAG_SEQUENCE_IDS) if not args.smoke else (2, 64)
    V, D, dtype = (STATIC_VOCAB, STATIC_DIM, "f16") if not args.smoke else (3000, 64, "f16")
    model = Model(f"static-{dtype}-{D}", V, D, dtype)
    if not args.smoke:
        pooler = model2vec_pooler(torch.empty(V, D).normal_(0, 0.05).half().numpy())
        from model2vec import StaticModel
        tokenizer = StaticModel.from_pretrained(STATIC_MODEL)
        sentences = static_sentences()
        sentence_tokens = sum(len(ids) for ids in tokenizer.tokenize(sentences))
    cases = []
    where = "in the LLC" if V * row_stride(dtype, D) <= LLC else "larger than the LLC"  # a machine's LLC may be smaller
    for N in BAG_SIZES if not args.smoke else (8,):
        for t in threads_list:
            bags = B * L // N
            c = Case("bags", f"model2vec's size, bags of {N}: {V}x{D} {dtype} ({where}), {bags} bags a call, mean + normalize -> f32", t,
                     B * L, V, D, dtype, "f32", cached=True, bag=N)
            c.contenders["embedrt"] = embedrt_sampler(c.key, model, B, L, t, "f32", 1, c.id_sets(), "--bag", N,
                                                      "--pooling", "mean", "--normalize")
            c.contenders["roofline"] = roofline_sampler(c.key + " roofline", dtype, D, B * L, t, "f32", 1, "--bag", N)
            if not args.smoke:
                flat = random_ids(V, (B * L,), c.id_sets())
                c.contenders["model2vec pooling (numpy)"] = model2vec_sampler(pooler, flat, bags, N)
                c.contenders[TOKENIZER] = (
                    lambda: timed(lambda: tokenizer.tokenize(sentences), sentence_tokens, 1))
            cases.append(c)
    return cases, [model]


# ---------------------------------------------------------------------------------------------
# Running, interleaved


def run_rounds(name, table):
    """table: {row: {contender: sample fn}}; R rounds, each contender one sample per round."""
    samples = {row: {c: [] for c in contenders} for row, contenders in table.items()}
    for r in range(args.rounds):
        for row, contenders in table.items():
            for c, fn in contenders.items():
                samples[row][c].append(fn())
        print(f"{name}: round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
    return samples


def median(v):
    return statistics.median(v) if v else None


def prefetch_text(result):
    """Where embedrt prefetched the rows of tables past half the LLC, for the machine line."""
    m = result["meta"]
    level, c = m.get("prefetch_level", "l1"), m.get("prefetch_calibration")
    if level == "l2":
        return ", embedrt prefetching rows into L2 (--prefetch-level l2)"
    if level != "auto":
        return ""
    used = [case.get("prefetch_level_used") for case in result["cases"]]
    text = ", embedrt's prefetch level chosen by the machine's calibration (--prefetch-level auto"
    if c and not c["note"]:
        text += (f": random rows gathered at {c['l1_gbs']:.1f} GB/s prefetched into L1, {c['l2_gbs']:.1f} into L2, "
                 f"so {c['level'].upper()}")
        if "min_rows_ahead" in c:
            text += (f"; random 1 KiB rows pooled at {c['near_gbs']:.1f} GB/s about 8 KiB of rows ahead, "
                     f"{c['far_gbs']:.1f} at least 32 rows ahead, so {c['min_rows_ahead']} rows at least")
    elif c:
        text += f": {c['note']}"
    if any(used):
        text += f"; L2 in {used.count('l2')} of {len(used)} cases, the others' tables within half the LLC or L1 chosen"
    return text + ")"


def write_report(result):
    report = markdown(result)
    print(report)
    with open(os.path.join(args.out, args.name + ".md"), "w") as f:
        f.write(report + "\n")
    with open(os.path.join(args.out, args.name + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    if not args.smoke:
        plot(os.path.join(args.out, args.name + ".json"), os.path.join(args.out, args.name + ".png"))


MEMORY_STALL_NOTED = 0.05  # seconds of full memory stall in one group that the report names


def memory_stall_seconds():
    """Seconds every task has stalled on memory (reclaim, refaults) since boot, from the kernel's
    pressure stall information; None where it is not available. A group during which this grows
    had its pages reclaimed, the tables' own among them: its figures may include reads from disk."""
    try:
        with open("/proc/pressure/memory") as f:
            for line in f:
                if line.startswith("full"):
                    return int(line.split("total=")[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return None
    return None


def main():
    global WORK, LLC, THREADS
    os.makedirs(args.out, exist_ok=True)
    if args.from_json:
        with open(args.from_json) as f:
            result = json.load(f)
        THREADS = result["meta"]["threads"]
        write_report(result)
        return
    if args.work:
        os.makedirs(args.work, exist_ok=True)  # (a missing --work folder was a traceback from tempfile)
    work = tempfile.TemporaryDirectory(dir=args.work, prefix="embedrt-compare-")
    WORK = work.name
    probe = bench("--synthetic", "1x64", "--roofline", "--batch", 1, "--seq", 64, "--seconds", 0.01)
    LLC = probe["llc"]["bytes"]
    meta = {"machine": platform.machine(), "cores": CORES, "isa": probe["isa"], "llc": probe["llc"],
            "threads": THREADS, "rounds": args.rounds, "seconds": args.seconds, "clock": args.clock,
            "prefetch_level": args.prefetch_level,
            # (roofline runs measure no prefetch level: a tiny gather reports the machine's calibration)
            "prefetch_calibration": bench("--synthetic", "1x64", "--batch", 1, "--seq", 1, "--seconds", 0.01)
                                    .get("prefetch_calibration") if args.prefetch_level == "auto" else None,
            "id_sets_rule": {"min": ID_SETS_MIN, "touch_vs_llc": ID_SETS_TOUCH, "coverage": ID_SETS_COVERAGE,
                             "max_id_bytes": ID_SETS_MAX_BYTES, "dram_touched_vs_llc": DRAM_TOUCHED},
            "load_average_start": os.getloadavg(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "roofline_statistic": "best", "bag_roofline": "fastest of its plans",
            "roofline_prefetch_ahead": [b for b in probe.get("prefetch_ahead_tried", []) if b > 0],
            "roofline_prefetch_levels": probe.get("prefetch_levels_tried", ["l1"])}
    if not args.smoke:
        meta.update(torch=torch.__version__, onnxruntime=ort.__version__, torch_capability=torch.backends.cpu.get_cpu_capability())
    result = {"meta": meta, "cases": [], "decode": {}, "residency": {}}
    bag_shapes()  # a malformed --bag-shapes is refused before anything runs
    builders = {"gpt2": lambda: gpt2_group(THREADS), "bert": lambda: bert_group(THREADS),
                "llama": lambda: big_group(THREADS, "Llama-3", 128256, 4096, [("f32", "f32"), ("bf16", "f32"), ("bf16", "bf16")], 4, 512),
                "gemma": lambda: big_group(THREADS, "Gemma-3", 262144, 5376, [("bf16", "bf16")], 4, 512, token_scale=73.5),
                "cached": lambda: cached_group(THREADS),
                **{f"small-{d}": (lambda d=d: small_group(THREADS, (d,))) for d in SMALL_DIMS},
                **{f"bags-{D}-{dtype}": (lambda t=(D, dtype): bags_group(THREADS, t)) for D, dtype in bag_tables()},
                "bags-static": lambda: static_group(THREADS)}
    # Groups run one after the other, each freed before the next. `small` runs one width at a time
    # and `bags` one table at a time: their tables are 4x the LLC, and on a machine whose LLC is
    # hundreds of MiB four widths or nine bag tables at once (file, torch's copy and its output
    # buffers: ~6 GB each) would not fit in memory.
    expands = {"gemma3n": ("gemma3n-e2b", "gemma3n-e4b"), "small": [f"small-{d}" for d in SMALL_DIMS],
               "bags": [f"bags-{D}-{dtype}" for D, dtype in bag_tables()] + ([] if args.bag_shapes else ["bags-static"])}
    groups = [g for group in args.groups.split(",") for g in expands.get(group, (group,))]
    cases = rows = None

    def summary(contender, values):
        """A contender's figure: the median of its samples; a roofline's, the best of them. A limit
        is what the machine reached at least once: another tenant's traffic only ever lowers a
        stream's rate (one run here had a dim-64 roofline's three samples at 10-14 M tokens/s
        against 23-24 M in the runs before and after), and a lowered roofline would flatter the
        case measured against it."""
        return max(values) if contender in ("roofline", ONE_BUFFER_ROOFLINE) else median(values)

    def record(cases, samples):
        for c in cases:
            emb, roof = LAST[c.key], LAST[c.key + " roofline"]
            if emb["id_sets"] != c.id_sets():
                raise RuntimeError(f"{c.title}: embedrt bench rotated {emb['id_sets']} id sets, the case {c.id_sets()}")
            touched = c.touched_bytes()
            result["cases"].append({
                "group": c.group, "title": c.title, "threads": c.threads, "tokens": c.tokens, "dim": c.dim,
                "table": c.table, "out": c.out, "bag": c.bag, "id_sets": c.id_sets(), "touched_bytes": touched,
                "touched_vs_llc": touched / LLC, "regime": regime(touched, emb["sizes"]["output_bytes_total"]),
                "sizes": emb["sizes"], "roofline_sizes": roof["sizes"],
                "nontemporal_roofline": roof["nontemporal"], "isa": emb["isa"],
                # the way fastest on the wall clock in the last round's roofline (under --clock cpu
                # the figure is the best CPU median of all ways and rounds: it may be another's)
                "roofline_way": roof.get("way"),
                "roofline_prefetch_level": roof.get("prefetch_level"),
                "prefetch_level_used": emb.get("prefetch_level_used"),
                "bytes_per_token": emb.get("bytes_per_token"), "roofline_bytes_per_token": roof.get("bytes_per_token"),
                "medians": {k: summary(k, v) for k, v in samples[c.key].items()}, "samples": samples[c.key]})

    def record_decode(rows, samples):
        for row in rows:
            s = samples[row]
            result["decode"][row] = {"medians_ns": {k: median(v) for k, v in s.items()}, "samples_ns": s}

    try:
        for group in groups:
            stalled_before = memory_stall_seconds()
            if group in builders:
                cases, models = builders[group]()
                samples = run_rounds(group, {c.key: c.contenders for c in cases})
                record(cases, samples)
            elif group.startswith("gemma3n-") and group[len("gemma3n-"):] in GEMMA3N:
                cases, rows, models = gemma3n_group(THREADS, group[len("gemma3n-"):])
                samples = run_rounds(group, {**{c.key: c.contenders for c in cases}, **rows})
                record(cases, samples)
                record_decode(rows, samples)
            elif group == "decode":
                rows, models = decode_group()
                samples = run_rounds(group, rows)
                record_decode(rows, samples)
            elif group == "residency":
                rows, models = residency_group()
                samples = run_rounds(group, rows)
                for row, s in samples.items():
                    doc = LAST[row]
                    result["residency"][row] = {
                        "tokens_per_second": median(s["batch"]), "decode_p50_ns": median(s.get("decode", [])),
                        "open_seconds": doc["residency"]["open_seconds"], "first_call_seconds": doc["residency"]["first_call_seconds"],
                        "table_rss": doc["residency"]["table_rss"],
                        "table_huge": doc["residency"]["table_anon_huge"] + doc["residency"]["table_file_pmd"],
                        "process_pss": doc["residency"]["process_pss"], "sizes": doc["sizes"], "id_sets": doc["id_sets"],
                        "samples": s}
            else:
                raise SystemExit(f"unknown group '{group}'")
            stalled = memory_stall_seconds()
            if stalled is not None and stalled_before is not None and stalled - stalled_before > MEMORY_STALL_NOTED:
                result["meta"].setdefault("memory_stalls", {})[group] = round(stalled - stalled_before, 3)
                print(f"compare.py: memory ran short during {group} ({stalled - stalled_before:.2f} s of full stall)",
                      file=sys.stderr)
            for m in models:
                m.remove()
            models = cases = rows = samples = None  # the group's tensors and sessions go now
            ID_TENSORS.clear()
            gc.collect()
    finally:
        work.cleanup()
    result["meta"]["load_average_end"] = os.getloadavg()
    write_report(result)


# ---------------------------------------------------------------------------------------------
# The report

PEERS = PLOTTED


def fmt_rate(v):
    return f"{v / 1e6:.2f} M" if v else "-"


def mib(b):
    return f"{b / 2**20:.0f} MiB" if b >= 2**20 else f"{b / 2**10:.0f} KiB"


def goals(result):
    """Issue 12's goals, each met or missed, from this run's medians (all cores)."""
    top = max(THREADS)
    by = {(c["title"], c["threads"]): c for c in result["cases"]}
    rows = []

    def against(c, peers, target, goal):
        """The lowest ratio to the given peers, each on equal terms (equal_terms), judged against
        target; with the ratio with outputs rotating beside it where that differs."""
        peers = [p for p in peers if c and c["medians"].get(p)]
        if not peers:
            return
        worst = min(peers, key=lambda p: equal_terms(c, p) / c["medians"][p])
        equal = equal_terms(c, worst) / c["medians"][worst]
        rotating = min(c["medians"]["embedrt"] / c["medians"][p] for p in peers)
        text = f"{equal:.2f}x"
        if abs(equal - rotating) > 0.005:
            text += f" on equal terms (into one output buffer against a peer that allocates its own); {rotating:.2f}x with outputs rotating"
        # Met only if every peer's rounds agree too (round_ratios); the lowest median of them shown.
        rounds = {p: r for p in peers if len(r := round_ratios(c, equal_terms_contender(c, p), p)) > 1}
        if rounds:
            low = min(rounds, key=lambda p: median(rounds[p]))
            r = rounds[low]
            text += (f"; round by round{f' (against {low})' if low != worst else ''} {min(r):.2f}-{max(r):.2f}x, "
                     f"median {median(r):.2f}x")
        met = equal >= target and all(median(r) >= target for r in rounds.values())
        rows.append((goal, text, "met" if met else "missed"))

    def ratio(title, peer, target, goal):
        against(by.get((title, top)), [peer], target, goal)

    # Issue 12's gathers (Gemma 3n and bags have their own sections).
    cases = [c for c in result["cases"] if c["threads"] == top and c["group"] not in ("gemma3n", "bags")]
    if cases:
        below = [c for c in cases if c["medians"]["embedrt"] < 0.9 * c["medians"]["roofline"]]
        worst = min(cases, key=lambda c: c["medians"]["embedrt"] / c["medians"]["roofline"])
        rows.append(("every case >= 90% of its own roofline",
                     f"{len(cases) - len(below)} of {len(cases)} cases; lowest {100 * worst['medians']['embedrt'] / worst['medians']['roofline']:.0f}% ({worst['title']})",
                     "met" if not below else "missed"))
    ratio("GPT-2 50257x768, 8x1024, f32 -> f32", "torch embedding_bag (FBGEMM)", 1.15, "GPT-2 f32: >= 1.15x FBGEMM's f32 gather (embedding_bag)")
    ratio("GPT-2 50257x768, 8x1024, int8 -> f32", "torch int8 rowwise bag (FBGEMM)", 1.2, "GPT-2 int8: >= 1.2x FBGEMM int8 rowwise")
    against(by.get(("GPT-2 50257x768, 8x1024, f32 -> f32", top)), ["torch best", "torch tutorial"], 1.6,
            "GPT-2 f32: >= 1.6x torch 2.x at its best")
    ratio("GPT-2 50257x768, 8x1024, bf16 -> bf16", "torch bf16 best", 1.6, "GPT-2 bf16 -> bf16: >= 1.6x torch bf16")
    ratio("BERT-base 30522x768 + LayerNorm, 8x512, f32 -> f32", "ONNX Runtime EmbedLayerNormalization", 2.5,
          "BERT-base + LN: >= 2.5x ONNX Runtime EmbedLayerNormalization")
    c = by.get(("Llama-3 128256x4096, 4x512, f32 -> f32", top))
    against(c, [k for k in (c["medians"] if c else ()) if k.startswith("torch")], 1.0,
            "Llama-3 f32: >= 1.0x torch at its best (index_select, Embedding, embedding_bag)")
    d = result["decode"]
    warm = d.get("warm, GPT-2 f32 (8 ids, cached)")
    if warm:
        v = warm["medians_ns"]["embedrt"]
        rows.append(("decode warm, dim 768: p50 <= 100 ns", f"{v:.0f} ns", "met" if v <= 100 else "missed"))
    cold = d.get("cold, GPT-2 f32 (row and output evicted)")
    if cold:
        r = cold["medians_ns"]["embedrt"] / cold["medians_ns"]["physical limit"]
        rows.append(("decode cold: p50 within 1.25x of the physical limit", f"{r:.2f}x ({cold['medians_ns']['embedrt']:.0f} vs "
                     f"{cold['medians_ns']['physical limit']:.0f} ns)", "met" if r <= 1.25 else "missed"))
    return rows

MEAN_PEERS = ("torch embedding_bag mean", "model2vec pooling (numpy)")


def matched(c, peer):
    """The embedrt figure a peer is compared with: mean-pooling peers against embedrt's mean and
    normalize (when measured), every other peer against the case's embedrt contender."""
    if peer in MEAN_PEERS and c["medians"].get("embedrt mean, normalized"):
        return c["medians"]["embedrt mean, normalized"]
    return c["medians"]["embedrt"]


def equal_terms_contender(c, peer):
    """The embedrt contender a peer is compared with on equal terms: into one output buffer for a
    peer that allocates its output per call (ALLOCATING_PEERS), where the case measured that;
    otherwise the one matched(c, peer) takes."""
    mean = peer in MEAN_PEERS and c["medians"].get("embedrt mean, normalized")
    one = "embedrt mean, normalized, one output buffer" if mean else "embedrt, one output buffer"
    if peer in ALLOCATING_PEERS and c["medians"].get(one):
        return one
    return "embedrt mean, normalized" if mean else "embedrt"


def equal_terms(c, peer):
    """The embedrt figure a peer is compared with on equal terms (equal_terms_contender)."""
    return c["medians"][equal_terms_contender(c, peer)]


def round_ratios(c, contender, peer):
    """contender / peer round by round, each round's two samples taken at most a minute or so
    apart. On a host whose memory bus another tenant takes now and then, a ratio of medians can
    rest on one round while the others disagree (GPT-2 int8 against FBGEMM on a Zen 5: 1.25x of
    medians, which was round 2's ratio, and rounds 1.42 / 1.25 / 0.98 / 0.67 / 0.95x, median
    0.98x, where round 3 was busy for both and in round 4 the bus cleared between embedrt's sample
    and FBGEMM's). A round can still straddle such a change; the median of the rounds resists one."""
    samples = c.get("samples", {})
    return [x / y for x, y in zip(samples.get(contender, []), samples.get(peer, [])) if y]


def ratio_text(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def int4_section(result):
    """Issue 12.5: an int4 table beside the int8 one, same shape, same run."""
    lines = []
    for t in sorted({c["threads"] for c in result["cases"]}):
        by = {c["table"]: c for c in result["cases"] if c["group"] == "gpt2" and c["threads"] == t and c["out"] == "f32"}
        if "int4" in by and "int8" in by:
            i4, i8 = by["int4"]["medians"], by["int8"]["medians"]
            if not lines:
                lines += ["", "int4 against int8 (GPT-2 shape, f32 output, this run):", "",
                          "| threads | int4 tokens/s | int8 tokens/s | int4 / int8 | int4 % of its roofline | int8 % of its roofline |",
                          "|---|---|---|---|---|---|"]
            lines.append(f"| {t} | {fmt_rate(i4['embedrt'])} | {fmt_rate(i8['embedrt'])} | {i4['embedrt'] / i8['embedrt']:.2f}x | "
                         f"{100 * i4['embedrt'] / i4['roofline']:.0f}% | {100 * i8['embedrt'] / i8['roofline']:.0f}% |")
    return lines


def gemma3n_section(result):
    """Issue 13: both outputs in one call against torch's two lookups and the two-table roofline."""
    cases = [c for c in result["cases"] if c["group"] == "gemma3n"]
    if not cases:
        return []
    lines = ["", "Gemma 3n (issue 13): inputs_embeds and per_layer_inputs of the same tokens in one call, bf16 tables and "
             "outputs; the roofline streams both tables' rows in and both outputs out (bytes per token in the table):", "",
             "| case | threads | bytes per token | embedrt tokens/s | % of roofline | torch 2 lookups best | embedrt / torch best | embedrt / torch tutorial |",
             "|---|---|---|---|---|---|---|---|"]
    for c in cases:
        m = c["medians"]
        best, tut = m.get("torch 2 lookups best"), m.get("torch 2 lookups tutorial")
        lines.append(f"| {c['title']} | {c['threads']} | {c.get('bytes_per_token') or 0:.0f} | {fmt_rate(m['embedrt'])} | "
                     f"{100 * m['embedrt'] / m['roofline']:.0f}% | {fmt_rate(best)} | "
                     f"{ratio_text(m['embedrt'], best)} | {ratio_text(m['embedrt'], tut)} |")
    return lines


def bags_section(result):
    """Issue 15's goals, each met or missed, from this run's medians (all cores)."""
    top = max(THREADS)
    cases = [c for c in result["cases"] if c["group"] == "bags" and c["threads"] == top]
    if not cases:
        return []
    rows = []
    def judged(pairs, target, goal):
        """A goal over (case, peer) pairs, judged on equal terms (equal_terms: into one output buffer
        against a peer that allocates its own) as a ratio of medians and round by round
        (round_ratios): a pair is met only if both reach the target, as issue 12's goals are. With
        the count and lowest ratio with embedrt's outputs rotating beside it."""
        equal = lambda cp: equal_terms(*cp) / cp[0]["medians"][cp[1]]  # noqa: E731
        rotating = lambda cp: matched(*cp) / cp[0]["medians"][cp[1]]  # noqa: E731
        rounds = {id(cp): r for cp in pairs if len(r := round_ratios(cp[0], equal_terms_contender(*cp), cp[1])) > 1}
        by_rounds = lambda cp: median(rounds[id(cp)]) if id(cp) in rounds else equal(cp)  # noqa: E731
        worst = min(pairs, key=equal)
        below = [cp for cp in pairs if equal(cp) < target or by_rounds(cp) < target]
        text = f"{len(pairs) - len(below)} of {len(pairs)}; lowest {equal(worst):.2f}x ({worst[1]}, {worst[0]['title']})"
        if any(abs(equal(cp) - rotating(cp)) > 0.005 for cp in pairs):
            text += (f" on equal terms (into one output buffer against a peer that allocates its own); with outputs "
                     f"rotating {sum(rotating(cp) >= target for cp in pairs)} of {len(pairs)}, lowest "
                     f"{rotating(min(pairs, key=rotating)):.2f}x")
        split = [cp for cp in pairs if equal(cp) >= target and by_rounds(cp) < target]
        if split:
            text += (f"; {len(split)} more met as a ratio of medians but not round by round (" +
                     ", ".join(f"{cp[0]['title']} against {cp[1]}: {equal(cp):.2f}x, rounds "
                               f"{' / '.join(f'{x:.2f}' for x in rounds[id(cp)])}x" for cp in split) + ")")
        rows.append((goal, text, "met" if not below else "missed"))

    fb = [(c, p) for c in cases for p in ("torch embedding_bag sum", "torch embedding_bag f16 sum",
                                          "torch int8 rowwise bag sum (FBGEMM)", "torch embedding_bag mean")
          if c["medians"].get(p)]
    if fb:
        judged(fb, 1.2, "bags: >= 1.2x FBGEMM (embedding_bag sum and mean, f16 sum, int8 rowwise bag) at every shape")
    llc = result["meta"]["llc"]["bytes"]
    m2v = [c for c in cases if c["medians"].get("model2vec pooling (numpy)")]
    for where, part in (("tables larger than the LLC", [c for c in m2v if c["sizes"]["table_bytes"] > llc]),
                        ("model2vec's own table size, in the LLC", [c for c in m2v if c["sizes"]["table_bytes"] <= llc])):
        if part:
            judged([(c, "model2vec pooling (numpy)") for c in part], 20,
                   f"bags: >= 20x model2vec's numpy pooling (mean + normalize), {where}")
    tokenized = [c for c in cases if c["medians"].get(TOKENIZER)]
    if tokenized:
        rate = median([c["medians"][TOKENIZER] for c in tokenized])
        pooled = min(matched(c, "model2vec pooling (numpy)") for c in tokenized)
        rows.append(("tokenization, reported apart", f"model2vec's tokenizer {fmt_rate(rate)} tokens/s on the project's "
                     f"prose (README, docs/BENCHMARKS.md); embedrt pools at least {pooled / rate:.0f}x as many ids a second", "-"))
    big = [c for c in cases if c["sizes"]["table_bytes"] > llc]
    if big:
        worst = min(big, key=lambda c: c["medians"]["embedrt"] / c["medians"]["roofline"])
        below = [c for c in big if c["medians"]["embedrt"] < 0.9 * c["medians"]["roofline"]]
        rows.append(("bags: >= 90% of the bag roofline for tables larger than the LLC",
                     f"{len(big) - len(below)} of {len(big)} cases; lowest {100 * worst['medians']['embedrt'] / worst['medians']['roofline']:.0f}% ({worst['title']})",
                     "met" if not below else "missed"))
    if not rows:
        return []
    return ["", f"Against the goals of issue 15 ({top} thread{'s' if top > 1 else ''}, this run):", "",
            "| goal | measured | |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]



def id_sets_text(meta):
    """How the ids rotated, as the run's metadata records it."""
    if "id_sets_rule" not in meta:
        return f"ids rotate through {meta['id_sets']} random sets"
    r = meta["id_sets_rule"]
    return (f"every contender of a case rotates through the case's own count of random id sets (its row in the table "
            f"below): enough that the distinct rows they touch are {r['touch_vs_llc']}x the LLC, or "
            f"{100 * r['coverage']:.0f}% of a table smaller than that; at least {r['min']} (the count in the "
            f"cache-resident case), at most {mib(r['max_id_bytes'])} of int64 ids")


def markdown(result):
    m = result["meta"]
    llc = m["llc"]
    busy = max(m["load_average_start"][0], m["load_average_end"][0])
    lines = [f"**Preliminary: the machine was busy** (1-minute load average up to {busy:.1f} on {m['cores']} cores while "
             "this ran; other work shared the cores and the memory bus). Ratios within the run are indicative; absolute "
             "figures are not the machine's.", ""] if busy > 0.5 else []
    if m.get("memory_stalls"):
        named = ", ".join(f"{g} ({v:.2f} s)" for g, v in m["memory_stalls"].items())
        lines += [f"**Memory ran short** during {named} (full memory stall, /proc/pressure/memory): pages were "
                  "reclaimed, possibly the tables' own, so those groups' figures may include reads from disk. Run them "
                  "alone (`--groups`) or on a machine with more memory.", ""]
    lines += [f"Machine: {m['machine']}, {m['cores']} cores, embedrt isa {m['isa']}, last-level cache {mib(llc['bytes'])} "
             f"(level {llc['level']}, shared by {llc['shared_by_cpus']} CPUs, {llc['instances']} instance(s), from {llc['source']})"
             + (f"; torch {m['torch']} ({m['torch_capability']}), ONNX Runtime {m['onnxruntime']}" if "torch" in m else "")
             + f". {m['rounds']} interleaved rounds of {m['seconds']} s samples, medians"
             + (", by CPU time per thread (--clock cpu)" if m.get("clock") == "cpu" else "")
             + prefetch_text(result)
             + f"; {id_sets_text(m)}; output buffers rotate until 4x the LLC (one buffer in the cache-resident case). "
             f"Load average {m['load_average_start'][0]:.2f} at the start, {m['load_average_end'][0]:.2f} at the end "
             f"({m['started']}).", ""]
    if result["cases"]:
        per_case = "id_sets_rule" in m  # runs before the per-case rule: one count, the regime from the table's size
        rule = (f"dram = the rows the id rotation touches >= {m['id_sets_rule']['dram_touched_vs_llc']}x and outputs >= 2x "
                "the LLC; cache = both fit in it together" if per_case else
                "dram = table >= 4x and outputs >= 2x the LLC; cache = both fit in it")
        best = m.get("roofline_statistic") == "best"
        ahead = m.get("roofline_prefetch_ahead")
        lines += ["Roofline: the case's table rows streamed in order into its output dtype (same ISA, threads and "
                  f"bytes), over a table 4x the LLC{'; the best of its samples (a limit: interference only lowers it)' if best else ''}"
                  + (f"; the fastest of its rows ahead prefetched in software {' or '.join(f'{b // 1024} KiB' for b in ahead)} "
                     "further on" + (" (into L1 or L2, as the kernels can)" if "l2" in m.get("roofline_prefetch_levels", [])
                                     else "") + ", or not" if ahead else "") + ". "
                  + ("A bag's roofline pools the bag's rows as the kernel does, by the fastest of its plans for rows "
                     "wider than the registers (embedrt bench --roofline --bag). "
                     if m.get("bag_roofline") and any(c.get("bag", 1) > 1 for c in result["cases"]) else "")
                  + f"Regime: {rule}; mixed otherwise.", ""]
        if per_case:
            lines += ["| case | threads | table / LLC | id sets | rows touched / LLC | output / LLC | regime | embedrt tokens/s | roofline | % of roofline |",
                      "|---|---|---|---|---|---|---|---|---|---|"]
        else:
            lines += ["| case | threads | table / LLC | output / LLC | regime | embedrt tokens/s | roofline | % of roofline |",
                      "|---|---|---|---|---|---|---|---|"]
        for c in result["cases"]:
            e, r = c["medians"]["embedrt"], c["medians"]["roofline"]
            s = c["sizes"]
            touched = f"{c['id_sets']} | {mib(c['touched_bytes'])} = {c['touched_vs_llc']:.2f}x | " if per_case else ""
            lines.append(f"| {c['title']} | {c['threads']} | {mib(s['table_bytes'])} = {s['table_vs_llc']:.2f}x | {touched}"
                         f"{mib(s['output_bytes_total'])} = {s['output_vs_llc']:.2f}x | {c.get('regime', s['regime'])} | "
                         f"{fmt_rate(e)} | {fmt_rate(r)} | {100 * e / r:.0f}% |")
        peer_rows = [(c, p) for c in result["cases"] for p in PEERS if c["medians"].get(p)]
        if peer_rows:
            lines += ["", "Peers (for bags, tokens/s counts ids pooled; a mean peer is compared with embedrt's mean "
                      "then L2-normalize, which does more than the peer). On equal terms: a peer that allocates its "
                      "output per call (torch's nn.Embedding, FBGEMM's bags, model2vec's numpy pooling) gets it back from the allocator still "
                      "cached, so it is also compared with embedrt into one output buffer, where the case measured it:", "",
                      "| case | threads | peer | peer tokens/s | embedrt / peer | on equal terms | peer % of roofline "
                      "(for a peer that allocates its own: into one output buffer, or rotating where faster) |",
                      "|---|---|---|---|---|---|---|"]
            for c, p in peer_rows:
                v = c["medians"][p]
                equal = equal_terms(c, p)
                lines.append(f"| {c['title']} | {c['threads']} | {p} | {fmt_rate(v)} | {matched(c, p) / v:.2f}x | "
                             f"{f'{equal / v:.2f}x' if equal != matched(c, p) else 'same'} | "
                             f"{100 * v / roofline_for(c['medians'], p):.0f}% |")
        one = [c for c in result["cases"] if c["medians"].get("embedrt, one output buffer")]
        if one:
            lines += ["", "The cases with a peer that allocates its output per call, also into one output buffer (what "
                      "that peer gets: the allocator hands back the output it freed, still cached), beside embedrt's "
                      "rotating outputs:", "",
                      "| case | threads | embedrt, outputs rotating | embedrt, one output buffer | one / rotating | "
                      "one buffer % of roofline (into one buffer, or rotating where faster) | "
                      "fastest allocating peer | its tokens/s | one buffer / it |", "|---|---|---|---|---|---|---|---|---|"]
            for c in one:
                m = c["medians"]
                e, o = m["embedrt"], m["embedrt, one output buffer"]
                # (a sum against a sum: the mean peers are compared with embedrt's mean in the table above)
                peer = max((p for p in ALLOCATING_PEERS if m.get(p) and p not in MEAN_PEERS), key=lambda p: m[p],
                           default=None)
                f = m[peer] if peer else None
                r1 = roofline_for(m, "embedrt, one output buffer") if m.get(ONE_BUFFER_ROOFLINE) else None
                lines.append(f"| {c['title']} | {c['threads']} | {fmt_rate(e)} | {fmt_rate(o)} | {o / e:.2f}x | "
                             f"{f'{100 * o / r1:.0f}%' if r1 else '-'} | "
                             f"{peer or '-'} | {fmt_rate(f) if f else '-'} | {ratio_text(o, f)} |")
    if result["decode"]:
        lines += ["", "Single-token decode (1 thread), p50 per call in ns (embedrt: the median over samples of "
                  "calls timed in groups; cold: each call timed alone with the row and output evicted (clflush) "
                  "first, interleaved call by call with the physical limit: the row's lines all prefetched at once, "
                  "then the add; Gemma 3n's cold per-layer row: the row evicted, the output cached (a decode loop's buffer), 2 or 10 us of other work, then the call, without and with Embedder::prefetch of the id before the other work):", "",
                  "| case | contender | ns (p50 unless p99 is named) |", "|---|---|---|"]
        for row, d in result["decode"].items():
            for k, v in d["medians_ns"].items():
                lines.append(f"| {row} | {k} | {v:.0f} |")
    if result["residency"]:
        lines += ["", f"Residency ({max(THREADS)} thread(s); batch as the throughput case; decode: 1 token, 65536 random ids):", "",
                  "| shape | mode | open | first call | tokens/s | decode p50 | table resident | in huge pages | process PSS |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for row, r in result["residency"].items():
            shape, mode = row.split(" | ")[0], " ".join(row.split(" | ")[1:])
            dec = f"{r['decode_p50_ns']:.0f} ns" if r["decode_p50_ns"] else "-"
            lines.append(f"| {shape} | {mode} | {1e3 * r['open_seconds']:.1f} ms | {1e3 * r['first_call_seconds']:.1f} ms | "
                         f"{fmt_rate(r['tokens_per_second'])} | {dec} | {mib(r['table_rss'])} | {mib(r['table_huge'])} | "
                         f"{mib(r['process_pss'])} |")
    lines += int4_section(result) + gemma3n_section(result) + bags_section(result)
    g = goals(result)
    if g:
        n = max(THREADS)
        lines += ["", f"Against the goals of issue 12 ({n} thread{'s' if n > 1 else ''}, this run):", "",
                  "| goal | measured | |", "|---|---|---|"]
        lines += [f"| {a} | {b} | {c} |" for a, b, c in g]
    return "\n".join(lines)


def plot(json_path, png_path):
    """% of each case's roofline for embedrt and its peers (all cores). Drawn here when this
    Python has matplotlib, else by Debian's python3 (python3-matplotlib)."""
    try:
        import matplotlib
    except ImportError:
        python = os.environ.get("EMBEDRT_TORCH_PYTHON", "/usr/bin/python3")
        subprocess.run([python, os.path.abspath(__file__), "--plot", json_path, png_path], check=True)
        return
    draw(json_path, png_path)




if __name__ == "__main__":
    main()
