// embedrt.Model: an opened .embt file and its Embedders, and Model.embed.
//
// A call reads and checks every Python argument under the GIL (arguments.hpp), then releases
// the GIL for the work on table data, so Python threads embedding at once run in parallel as
// C++ threads do. The requests to come (several named outputs, pooled bags, prefetch) take the
// same steps: read the ids, choose the output(s), release the GIL, call the Embedder.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>
#include <thread>

#include "arguments.hpp"
#include "bindings.hpp"
#include "errors.hpp"
#include "inspect_json.hpp"
#include "python_json.hpp"

namespace embedrt::python {
namespace {

// Most threads one call may ask for: enough for any machine this runs on, and a bound on the
// arenas kept below.
int max_threads() {
  static const int limit = std::max(256, static_cast<int>(std::thread::hardware_concurrency()));
  return limit;
}

// One oneTBB arena per thread count a call asked for, shared by every model, made on first use
// and kept for the life of the process (an arena cannot be destroyed while a call may run in it;
// max_threads() bounds how many there can be).
tbb::task_arena* arena_of(int threads) {
  static std::mutex mutex;
  static auto* arenas = new std::map<int, std::unique_ptr<tbb::task_arena>>();
  std::lock_guard lock(mutex);
  auto& arena = (*arenas)[threads];
  if (!arena) arena = std::make_unique<tbb::task_arena>(threads);
  return arena.get();
}

// One open model, shared by its Python object and every call in flight: close() drops the
// object's reference, and calls already running finish on the mapping they hold.
class ModelState {
 public:
  ModelState(Model model, Embedder embedder, const EmbedderOptions& options)
      : model_(std::move(model)), embedder_(std::move(embedder)), options_(options) {}

  const Model& model() const noexcept { return model_; }
  const Embedder& embedder() const noexcept { return embedder_; }

  // The Embedder that runs on an arena of `threads` threads (with the same ISA).
  const Embedder& embedder(int threads) const {
    std::lock_guard lock(mutex_);
    auto& sized = sized_[threads];
    if (!sized) {
      EmbedderOptions options = options_;  // the same memory choices
      options.isa = embedder_.isa();
      options.arena = arena_of(threads);
      auto made = Embedder::create(model_, options);
      if (!made) raise_error(std::move(made).error());
      sized = std::make_unique<const Embedder>(std::move(*made));
    }
    return *sized;
  }

 private:
  Model model_;
  Embedder embedder_;  // the default arena: every core
  EmbedderOptions options_;  // what Model() asked for (prefetch level, streaming stores)
  mutable std::mutex mutex_;
  mutable std::map<int, std::unique_ptr<const Embedder>> sized_;
};

class PyModel {
 public:
  PyModel(std::shared_ptr<const ModelState> state, std::string path) : state_(std::move(state)), path_(std::move(path)) {}

  std::shared_ptr<const ModelState> live() const {
    if (!state_) throw RaisedError(Error(ErrorCode::kInvalidArgument, "the model is closed", {.file = path_}));
    return state_;
  }
  void close() noexcept { state_.reset(); }
  bool closed() const noexcept { return state_ == nullptr; }
  const std::string& path() const noexcept { return path_; }

 private:
  std::shared_ptr<const ModelState> state_;  // null once closed
  std::string path_;
};

// One output of a model, as Model.outputs lists it.
struct OutputInfo {
  std::string name;
  std::uint64_t dim;
  std::vector<std::uint64_t> shape;  // per token
  std::string dtype;                 // the natural output dtype: what embed() returns by default
  std::string pooling;               // the model's default for pool(): "none", "sum", "mean", "max"
  bool normalize;                    // ... and whether pool() normalizes by default
};

// The outputs `output=` names: None (the primary one), a name, or a list or tuple of names
// (`several` is then true and the call returns a dict). Unknown names and repeats are refused.
std::vector<std::size_t> read_outputs(const Model& model, nb::handle output, bool& several) {
  const auto index_of = [&](nb::handle name) -> std::size_t {
    if (!PyUnicode_Check(name.ptr())) raise_invalid("output", "expected a name (str) or a list of names");
    const std::string text = nb::cast<std::string>(name);
    const embedrt::OutputInfo* o = model.find_output(text);
    if (o == nullptr) {
      std::string names;
      for (const embedrt::OutputInfo& each : model.outputs()) names += (names.empty() ? "'" : ", '") + each.name + "'";
      raise_invalid("output", "'" + text + "' is not an output of the model (" + names + ")");
    }
    return static_cast<std::size_t>(o - model.outputs().data());
  };
  several = false;
  if (output.is_none()) return {0};
  if (PyUnicode_Check(output.ptr())) return {index_of(output)};
  if (!PyList_Check(output.ptr()) && !PyTuple_Check(output.ptr())) {
    raise_invalid("output", "expected a name (str) or a list of names");
  }
  several = true;
  std::vector<std::size_t> indices;
  for (nb::handle name : output) {
    const std::size_t index = index_of(name);
    if (std::find(indices.begin(), indices.end(), index) != indices.end()) {
      raise_invalid("output", "'" + model.outputs()[index].name + "' is named twice");
    }
    indices.push_back(index);
  }
  if (indices.empty()) raise_invalid("output", "an empty list; name at least one output");
  return indices;
}

// The Embedder for `threads=` (None: every core).
const Embedder& embedder_for(const ModelState& state, nb::handle threads) {
  if (threads.is_none()) return state.embedder();
  if (!PyLong_Check(threads.ptr()) || PyBool_Check(threads.ptr())) raise_invalid("threads", "expected an int or None");
  const long n = PyLong_AsLong(threads.ptr());
  if (PyErr_Occurred() != nullptr || n < 1 || n > max_threads()) {
    PyErr_Clear();
    raise_invalid("threads", "expected 1 to " + std::to_string(max_threads()) + "; got " + nb::str(threads).c_str());
  }
  return state.embedder(static_cast<int>(n));
}

// The outputs' arrays: `out` (an array, or with several outputs a dict by name) or new ones, of
// `leading` + the output's per-token shape, in the dtype asked for or the output's natural one.
std::vector<OutputArray> output_arrays(const Model& model, const std::vector<std::size_t>& outputs, bool several,
                                       std::span<const std::int64_t> leading, nb::handle out, nb::handle dtype) {
  const std::optional<DTypeRequest> requested = read_dtype(dtype);
  if (several && !out.is_none() && !PyDict_Check(out.ptr())) {
    raise_invalid("out", "with several outputs, a dict of arrays by output name (or None)");
  }
  std::vector<OutputArray> arrays;
  for (std::size_t index : outputs) {
    const embedrt::OutputInfo& o = model.outputs()[index];
    std::vector<std::int64_t> shape(leading.begin(), leading.end());
    for (std::uint64_t n : o.token_shape) shape.push_back(static_cast<std::int64_t>(n));
    nb::handle given = out;
    if (several && !out.is_none()) {
      PyObject* item = PyDict_GetItemString(out.ptr(), o.name.c_str());
      given = item != nullptr ? nb::handle(item) : nb::handle(Py_None);
    }
    arrays.push_back(given.is_none()
                         ? new_output(shape, requested.value_or(DTypeRequest{natural_output_dtype(model, index), false}))
                         : checked_output(given, shape, requested));
  }
  return arrays;
}

OutputSpan span_of(const OutputArray& a) {
  auto span = OutputSpan::from_bytes({static_cast<std::byte*>(a.data), a.elements * output_element_bytes(a.dtype)}, a.dtype);
  if (!span) raise_error(std::move(span).error());
  return *span;
}

// What a call returns: the one array, or a dict of them by output name.
nb::object result_of(const Model& model, const std::vector<std::size_t>& outputs, bool several,
                     std::vector<OutputArray>& arrays) {
  if (!several) return std::move(arrays[0].result);
  nb::dict result;
  for (std::size_t k = 0; k < outputs.size(); ++k) result[model.outputs()[outputs[k]].name.c_str()] = arrays[k].result;
  return result;
}

nb::object decoded_path(const std::string& path) {
  return nb::steal(PyUnicode_DecodeFSDefaultAndSize(path.data(), static_cast<Py_ssize_t>(path.size())));
}

// cache_bytes=: None (the cache detected) or a positive int.
std::optional<std::uint64_t> read_cache_bytes(nb::handle value) {
  if (value.is_none()) return std::nullopt;
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) raise_invalid("cache_bytes", "expected an int or None");
  const unsigned long long bytes = PyLong_AsUnsignedLongLong(value.ptr());
  if (PyErr_Occurred() != nullptr || bytes == 0) {
    PyErr_Clear();
    raise_invalid("cache_bytes", std::string("expected a positive number of bytes; got ") + nb::str(value).c_str());
  }
  return bytes;
}

// min_rows_ahead=: None (the machine's choice) or an int; Embedder::create refuses one outside 4-256.
std::optional<std::uint64_t> read_min_rows_ahead(nb::handle value) {
  if (value.is_none()) return std::nullopt;
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) raise_invalid("min_rows_ahead", "expected an int or None");
  const unsigned long long rows = PyLong_AsUnsignedLongLong(value.ptr());
  if (PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    raise_invalid("min_rows_ahead", std::string("expected 4 to 256 rows; got ") + nb::str(value).c_str());
  }
  return rows;
}

void init_model(PyModel* self, nb::handle path, const std::string& residency, bool lock_in_memory,
                const std::string& prefetch_level, const std::string& nontemporal, nb::handle cache_bytes,
                nb::handle min_rows_ahead) {
  const std::string file = read_path(path, "path");
  OpenOptions options;
  if (const auto mode = parse_residency(residency)) {
    options.residency = *mode;
  } else {
    raise_invalid("residency", "'" + residency + "'; expected 'mmap', 'populate' or 'copy'");
  }
  options.lock_in_memory = lock_in_memory;
  EmbedderOptions embedder_options;
  if (const auto level = parse_prefetch_level(prefetch_level)) {
    embedder_options.prefetch_level = *level;
  } else {
    raise_invalid("prefetch_level", "'" + prefetch_level + "'; expected 'auto', 'l1' or 'l2'");
  }
  if (const auto mode = parse_nontemporal(nontemporal)) {
    embedder_options.nontemporal = *mode;
  } else {
    raise_invalid("nontemporal", "'" + nontemporal + "'; expected 'auto', 'always' or 'never'");
  }
  embedder_options.cache_bytes = read_cache_bytes(cache_bytes);
  embedder_options.min_rows_ahead = read_min_rows_ahead(min_rows_ahead);
  std::optional<Result<Model>> model;
  std::optional<Result<Embedder>> embedder;
  {
    nb::gil_scoped_release release;  // populate, copy and mlock read the whole file; auto may calibrate
    model.emplace(Model::open(file, options));
    if (*model) embedder.emplace(Embedder::create(**model, embedder_options));
  }
  if (!*model) raise_error(std::move(*model).error());
  if (!*embedder) raise_error(std::move(*embedder).error());
  new (self) PyModel(std::make_shared<const ModelState>(std::move(**model), std::move(**embedder), embedder_options), file);
}

// The positions argument or the segments argument: one value per id, in the ids' shape.
IntArray per_token(nb::handle object, std::string_view argument, const IntArray& ids) {
  IntArray values = read_int_array(object, argument);
  if (values.ndim != ids.ndim || values.shape[0] != ids.shape[0] || values.shape[1] != ids.shape[1]) {
    const auto text = [](const IntArray& a) {
      std::string s = "(";
      for (int i = 0; i < a.ndim; ++i) s += (i ? ", " : "") + std::to_string(a.shape[i]);
      return s + (a.ndim == 1 ? ",)" : ")");
    };
    raise_invalid(argument, "shape " + text(values) + "; expected " + text(ids) + ", the shape of ids");
  }
  return values;
}

nb::object embed(const PyModel& self, nb::handle ids, nb::handle positions, nb::handle starts, nb::handle segments,
                 nb::handle out, nb::handle dtype, nb::handle threads, nb::handle output) {
  const std::shared_ptr<const ModelState> state = self.live();
  const Model& model = state->model();

  const IntArray tokens = read_int_array(ids, "ids");
  if (tokens.ndim == 0) raise_invalid("ids", "a single value; expected shape [L] or [B, L]");
  const std::uint64_t sequences = tokens.ndim == 2 ? static_cast<std::uint64_t>(tokens.shape[0]) : 1;
  EmbedRequest request;
  request.ids = tokens.values;
  request.sequences = sequences;

  IntArray position_ids, segment_ids;
  std::vector<std::uint64_t> start_positions;
  if (!positions.is_none()) {
    position_ids = per_token(positions, "positions", tokens);
    request.position_ids = position_ids.values;
  }
  if (!starts.is_none()) {
    if (!positions.is_none()) raise_invalid("starts", "positions and starts exclude each other; give one");
    const IntArray given = read_int_array(starts, "starts");
    const bool one_per_sequence = given.ndim == 1 && static_cast<std::uint64_t>(given.shape[0]) == sequences;
    if (given.ndim != 0 && !one_per_sequence) {
      raise_invalid("starts", "expected an int or one start per sequence (" + std::to_string(sequences) + " values); got " +
                                  std::to_string(given.values.size()) + " values in " + std::to_string(given.ndim) + " dimensions");
    }
    for (std::size_t i = 0; i < given.values.size(); ++i) {
      if (given.values[i] < 0) raise_invalid("starts", "value " + std::to_string(given.values[i]) + " at index " + std::to_string(i) + " is negative");
    }
    if (given.ndim == 0) {
      request.start = static_cast<std::uint64_t>(given.values[0]);
    } else {
      start_positions.assign(given.values.begin(), given.values.end());
      request.start_positions = start_positions;
    }
  }
  if (!segments.is_none()) {
    segment_ids = per_token(segments, "segments", tokens);
    request.segment_ids = segment_ids.values;
  }

  const Embedder& embedder = embedder_for(*state, threads);
  bool several = false;
  const std::vector<std::size_t> outputs = read_outputs(model, output, several);
  std::vector<std::int64_t> leading(tokens.shape, tokens.shape + tokens.ndim);
  std::vector<OutputArray> arrays = output_arrays(model, outputs, several, leading, out, dtype);
  std::vector<OutputTarget> targets;
  for (std::size_t k = 0; k < outputs.size(); ++k) targets.push_back({outputs[k], span_of(arrays[k])});

  std::optional<Status> status;
  {
    nb::gil_scoped_release release;
    status.emplace(embedder.embed(request, targets));
  }
  if (!*status) raise_error(std::move(*status).error());
  return result_of(model, outputs, several, arrays);
}

nb::object pool(const PyModel& self, nb::handle ids, nb::handle offsets, nb::handle weights, nb::handle mode,
                nb::handle normalize, nb::handle padding_id, nb::handle out, nb::handle dtype, nb::handle threads,
                nb::handle output) {
  const std::shared_ptr<const ModelState> state = self.live();
  const Model& model = state->model();
  IntArray tokens = read_int_array(ids, "ids");
  if (tokens.ndim == 0) raise_invalid("ids", "a single value; expected shape [N] (with offsets) or [B, L] (a bag per row)");
  FloatArray per_id;
  if (!weights.is_none()) {
    per_id = read_float_array(weights, "weights");
    if (per_id.values.size() != tokens.values.size()) {
      raise_invalid("weights", std::to_string(per_id.values.size()) + " weights for " +
                                   std::to_string(tokens.values.size()) + " ids; give one per id");
    }
  }
  // Bags: the offsets given, else each row of [B, L] ids, without its padding_id tokens.
  std::vector<std::uint64_t> bounds;
  if (!offsets.is_none()) {
    if (!padding_id.is_none()) raise_invalid("padding_id", "applies to rows of [B, L] ids, not to offsets");
    const IntArray given = read_int_array(offsets, "offsets");
    if (given.ndim != 1) raise_invalid("offsets", "expected one dimension: bags + 1 boundaries into ids");
    for (std::int64_t v : given.values) {
      if (v < 0) raise_invalid("offsets", "value " + std::to_string(v) + " is negative");
      bounds.push_back(static_cast<std::uint64_t>(v));
    }
  } else {
    if (tokens.ndim != 2) raise_invalid("ids", "one dimension needs offsets (bags + 1 boundaries); or give [B, L], a bag per row");
    std::optional<std::int64_t> pad;
    if (!padding_id.is_none()) pad = read_int_array(padding_id, "padding_id").values.at(0);
    std::vector<std::int64_t> kept;
    std::vector<float> kept_weights;
    bounds.push_back(0);
    for (std::int64_t row = 0; row < tokens.shape[0]; ++row) {
      for (std::int64_t t = 0; t < tokens.shape[1]; ++t) {
        const std::size_t i = static_cast<std::size_t>(row * tokens.shape[1] + t);
        if (pad && tokens.values[i] == *pad) continue;
        kept.push_back(tokens.values[i]);
        if (!per_id.values.empty()) kept_weights.push_back(per_id.values[i]);
      }
      bounds.push_back(kept.size());
    }
    tokens.values = std::move(kept);
    if (!per_id.values.empty()) per_id.values = std::move(kept_weights);
  }
  BagRequest request;
  request.ids = tokens.values;
  request.offsets = bounds;
  request.weights = per_id.values;
  if (!mode.is_none()) {
    const auto parsed = PyUnicode_Check(mode.ptr()) ? parse_pooling_mode(nb::cast<std::string>(mode)) : std::nullopt;
    if (!parsed || *parsed == PoolingMode::kNone) raise_invalid("mode", "expected 'sum', 'mean' or 'max'");
    request.mode = *parsed;
  }
  if (!normalize.is_none()) {
    if (!PyBool_Check(normalize.ptr())) raise_invalid("normalize", "expected True, False or None");
    request.normalize = normalize.ptr() == Py_True;
  }
  const Embedder& embedder = embedder_for(*state, threads);
  bool several = false;
  const std::vector<std::size_t> outputs = read_outputs(model, output, several);
  const std::int64_t bags[1] = {static_cast<std::int64_t>(bounds.empty() ? 0 : bounds.size() - 1)};
  std::vector<OutputArray> arrays = output_arrays(model, outputs, several, bags, out, dtype);
  std::vector<OutputSpan> spans;
  for (const OutputArray& a : arrays) spans.push_back(span_of(a));
  Status status;
  {
    nb::gil_scoped_release release;
    for (std::size_t k = 0; k < outputs.size() && status; ++k) status = embedder.pool(request, spans[k], outputs[k]);
  }
  if (!status) raise_error(std::move(status).error());
  return result_of(model, outputs, several, arrays);
}

void prefetch(const PyModel& self, nb::handle ids, nb::handle output, bool page_in) {
  const std::shared_ptr<const ModelState> state = self.live();
  const IntArray tokens = read_int_array(ids, "ids");
  std::vector<std::size_t> outputs;
  if (!output.is_none()) {
    bool several = false;
    outputs = read_outputs(state->model(), output, several);
  }
  std::optional<Status> status;
  {
    nb::gil_scoped_release release;
    status.emplace(state->embedder().prefetch(tokens.values, outputs,
                                              page_in ? PrefetchTarget::kMemory : PrefetchTarget::kCache));
  }
  if (!*status) raise_error(std::move(*status).error());
}

constexpr const char* kPoolDoc = R"(Pools bags of token ids into one vector each (FORMAT.md 7.2), as torch's
EmbeddingBag and static sentence-embedding models (model2vec) compute them.

Args:
  ids: int32 or int64 token ids: shape [N] with `offsets`, or [B, L] where each row is a bag.
  offsets: bags + 1 boundaries into ids (bag b is ids[offsets[b]:offsets[b+1]]); an empty bag
    pools to zeros.
  weights: one float per id (torch's per_sample_weights), for mode sum or mean. Default: the
    model's per-id weights, if it has them.
  mode: "sum", "mean" or "max". Default: the model's (a static model says mean).
  normalize: L2-normalize each pooled vector. Default: the model's.
  padding_id: with [B, L] ids, tokens with this id are left out of their row's bag.
  out, dtype, threads, output: as for embed().

Returns:
  An array of shape [bags] + the output's per-token shape (a dict by name with several outputs).)";

constexpr const char* kPrefetchDoc = R"(Starts bringing the rows of these ids toward this core and returns at once, so a
following embed() of them finds them in cache: for a decode loop that knows its next token a
little before it needs its rows.

Args:
  ids: token ids (any shape); ids past a table are skipped.
  output: a name or list of names (default: every output).
  page_in: also ask the OS to read the rows' pages in (a cold, memory-mapped model).)";

constexpr const char* kEmbedDoc = R"(Embeds token ids: the model's first-layer input for each token.

Args:
  ids: int32 or int64 token ids, shape [L] (one sequence) or [B, L] (B sequences of L tokens):
    a numpy array, a torch or jax tensor (anything with the buffer protocol or DLPack, on the
    CPU), or a list. Any strides; the ids are copied (8 bytes a token) before the work starts.
  positions: position ids, one per token, in the shape of ids. Excludes `starts`.
  starts: where each sequence's positions start (decoding with a KV cache continues at the
    cached length): an int for every sequence, or one per sequence, shape [B].
  segments: token type ids (BERT), in the shape of ids.
  out: the array to write into, of shape ids.shape + the output's per-token shape: writable,
    C-contiguous, float32, bfloat16 (torch.bfloat16 or ml_dtypes.bfloat16) or float16. Returned
    as given. With several outputs, a dict of such arrays by output name.
  dtype: the output dtype when `out` is not given: "float32", "bfloat16", "float16" (or "f32",
    "bf16", "f16"), a numpy dtype, or a torch dtype, which makes the result a torch tensor.
    Default: the model's natural dtype (bf16 tables answer in bf16, as transformers does).
  threads: run on an arena of this many threads (default: every core). Requests writing less
    than 256 KiB always run on the calling thread.
  output: which output (Model.outputs): a name (default: the primary one), or a list of names,
    which makes the result a dict of arrays by name (Gemma 3n: inputs_embeds, per_layer_inputs).

Returns:
  `out`, or a new array of shape ids.shape + the output's per-token shape that owns its memory:
  a numpy array, or a torch tensor when `dtype` is a torch dtype; a dict with several outputs.

Raises:
  InvalidArgumentError (a ValueError) for a wrong shape, dtype or argument, naming it;
  OutOfRangeError (a ValueError) for an id, position or segment past its table, naming the
  sequence and position. Nothing is written unless every id is valid.

The GIL is released while the rows are gathered: Python threads embedding at once run in
parallel.)";

}  // namespace

void bind_model(nb::module_& m) {
  nb::class_<OutputInfo>(m, "OutputInfo", "One output of a model: its name, values per token, shape per token and natural dtype.")
      .def_ro("name", &OutputInfo::name, "The output's name (\"embeddings\" unless the model names it).")
      .def_ro("dim", &OutputInfo::dim, "Values per token.")
      .def_prop_ro("shape", [](const OutputInfo& o) {
            nb::list dims;
            for (std::uint64_t d : o.shape) dims.append(d);
            return nb::tuple(dims);
          }, "The shape of one token's output: (dim,), or e.g. (30, 256) for Gemma 3n's per-layer inputs.")
      .def_ro("dtype", &OutputInfo::dtype, "The dtype embed() returns by default: \"f32\", \"bf16\" or \"f16\".")
      .def_ro("pooling", &OutputInfo::pooling, "pool()'s default mode: \"none\" (give one), \"sum\", \"mean\" or \"max\".")
      .def_ro("normalize", &OutputInfo::normalize, "Whether pool() L2-normalizes by default.")
      .def("__repr__", [](const OutputInfo& o) {
        return "OutputInfo(name='" + o.name + "', dim=" + std::to_string(o.dim) + ", dtype='" + o.dtype + "')";
      });

  nb::class_<PyModel>(m, "Model", nb::is_weak_referenceable(), R"(An opened .embt model: memory-mapped, validated, shared by every thread.

Model(path, residency="mmap", lock_in_memory=False, prefetch_level="auto", nontemporal="auto",
      cache_bytes=None, min_rows_ahead=None)

  path: the .embt file (str, bytes or os.PathLike).
  residency: "mmap" maps the file and lets the page cache bring rows in on first use (opening
    costs O(1)); "populate" reads every page in at open; "copy" reads the file into a private
    copy on transparent huge pages (fewer TLB misses, immune to the file changing underneath,
    but not shared with other processes).
  lock_in_memory: mlock the mapping so it is never paged out; refused (OSError) if the system
    does not allow it.
  prefetch_level: where the kernels prefetch the rows of a table larger than half the last-level
    cache: "l1", "l2", or "auto", the level this machine measures faster (once per process: about
    0.1 s and a 64-256 MiB buffer for a moment, which "l1" or "l2" skip). prefetch_levels says
    which one each output uses.
  min_rows_ahead: the fewest rows ahead that rows of up to 1 KiB of such a table are prefetched,
    4 to 256 (None: the calibration's under "auto", else 4). min_rows_ahead says what each output
    uses.
  nontemporal: streaming stores for a call's output: "auto" (when it exceeds half the last-level
    cache), "always" or "never".
  cache_bytes: the last-level cache these choices assume, in bytes (None: the one detected;
    less than the machine's when other work shares it). None of them changes a result's bits.

A Model is immutable and thread-safe; close() (or a with block) releases the mapping once the
calls in flight have finished.)")
      .def("__init__", &init_model, nb::arg("path"), nb::arg("residency") = "mmap", nb::arg("lock_in_memory") = false,
           nb::arg("prefetch_level") = "auto", nb::arg("nontemporal") = "auto", nb::arg("cache_bytes") = nb::none(),
           nb::arg("min_rows_ahead") = nb::none())
      .def("embed", &embed, nb::arg("ids").none(), nb::kw_only(), nb::arg("positions") = nb::none(), nb::arg("starts") = nb::none(),
           nb::arg("segments") = nb::none(), nb::arg("out") = nb::none(), nb::arg("dtype") = nb::none(),
           nb::arg("threads") = nb::none(), nb::arg("output") = nb::none(), kEmbedDoc)
      .def("pool", &pool, nb::arg("ids").none(), nb::arg("offsets") = nb::none(), nb::kw_only(),
           nb::arg("weights") = nb::none(), nb::arg("mode") = nb::none(), nb::arg("normalize") = nb::none(),
           nb::arg("padding_id") = nb::none(), nb::arg("out") = nb::none(), nb::arg("dtype") = nb::none(),
           nb::arg("threads") = nb::none(), nb::arg("output") = nb::none(), kPoolDoc)
      .def("prefetch", &prefetch, nb::arg("ids").none(), nb::kw_only(), nb::arg("output") = nb::none(),
           nb::arg("page_in") = false, kPrefetchDoc)
      .def_prop_ro("path", [](const PyModel& self) { return decoded_path(self.path()); }, "The file's path.")
      .def_prop_ro("dim", [](const PyModel& self) { return self.live()->model().dim(); }, "Values per token.")
      .def_prop_ro("vocab_size", [](const PyModel& self) { return self.live()->model().vocab_size(); },
                   "Rows of the token table: ids are in [0, vocab_size).")
      .def_prop_ro("max_positions", [](const PyModel& self) -> std::optional<std::uint64_t> {
            const Model& model = self.live()->model();
            if (model.position() == nullptr) return std::nullopt;
            return model.max_positions();
          }, "Positions accepted (start + length), or None when the model has no position table.")
      .def_prop_ro("table_dtype", [](const PyModel& self) { return std::string(dtype_name(self.live()->model().token().dtype)); },
                   "The token table's dtype: \"f32\", \"bf16\", \"f16\" or \"int8\".")
      .def_prop_ro("isa", [](const PyModel& self) { return std::string(isa_name(self.live()->embedder().isa())); },
                   "The kernels' instruction set: \"avx512bf16\", \"avx512\", \"avx2\", \"sse4.2\" or \"scalar\" (EMBEDRT_ISA forces one).")
      .def_prop_ro("prefetch_levels", [](const PyModel& self) {
            const std::shared_ptr<const ModelState> state = self.live();
            nb::dict levels;
            for (std::size_t k = 0; k < state->model().outputs().size(); ++k) {
              levels[state->model().outputs()[k].name.c_str()] = std::string(prefetch_level_name(state->embedder().prefetch_level(k)));
            }
            return levels;
          }, "Where the kernels prefetch each output's rows, by output name: \"l1\" or \"l2\" (prefetch_level=\"auto\" resolved; "
             "a table that fits in half the last-level cache, or an ISA without L2 kernels, is \"l1\" whatever was asked).")
      .def_prop_ro("min_rows_ahead", [](const PyModel& self) {
            const std::shared_ptr<const ModelState> state = self.live();
            nb::dict rows;
            for (std::size_t k = 0; k < state->model().outputs().size(); ++k) {
              rows[state->model().outputs()[k].name.c_str()] = state->embedder().min_rows_ahead(k);
            }
            return rows;
          }, "The fewest rows ahead the kernels prefetch each output's rows of up to 1 KiB, by output name "
             "(min_rows_ahead=None resolved; 4 for a table that fits in half the last-level cache).")
      .def_prop_ro("metadata", [](const PyModel& self) { return to_python(describe::metadata_json(self.live()->model().metadata())); },
                   "The file's metadata as a dict (the \"metadata\" of embedrt.inspect()).")
      .def_prop_ro("outputs", [](const PyModel& self) {
            const Model& model = self.live()->model();
            std::vector<OutputInfo> outputs;
            for (std::size_t k = 0; k < model.outputs().size(); ++k) {
              const embedrt::OutputInfo& o = model.outputs()[k];
              outputs.push_back({o.name, o.dim(), o.token_shape, std::string(output_dtype_name(natural_output_dtype(model, k))),
                                 std::string(pooling_mode_name(o.rules->pooling)), o.rules->normalize});
            }
            return outputs;
          }, "The model's outputs, the primary one first.")
      .def_prop_ro("tables", [](const PyModel& self) { return to_python(describe::table_file_json(self.live()->model().file())["tables"]); },
                   "The file's tables as dicts: name, role, dtype, shape, row_stride, offset, size, checksum.")
      .def_prop_ro("closed", &PyModel::closed, "True once close() was called.")
      .def("verify", [](const PyModel& self) {
            const std::shared_ptr<const ModelState> state = self.live();
            std::optional<Status> status;
            {
              nb::gil_scoped_release release;
              status.emplace(state->model().file().verify());
            }
            if (!*status) raise_error(std::move(*status).error());
          }, "Recomputes every checksum of the file; raises BadFileError naming the first table that differs.")
      .def("close", &PyModel::close, "Releases the model; calls already running finish first. Idempotent.")
      .def("__enter__", [](nb::handle self) { return self; })
      .def("__exit__", [](PyModel& self, nb::handle, nb::handle, nb::handle) { self.close(); },
           nb::arg("type").none(), nb::arg("value").none(), nb::arg("traceback").none())
      .def("__repr__", [](const PyModel& self) {
        std::string text = std::string("embedrt.Model('") + nb::str(decoded_path(self.path())).c_str() + "'";
        if (self.closed()) return text + ", closed)";
        const Model& model = self.live()->model();
        return text + ", family=" + model.metadata().family + ", vocab_size=" + std::to_string(model.vocab_size()) +
               ", dim=" + std::to_string(model.dim()) + ", table_dtype=" + std::string(dtype_name(model.token().dtype)) + ")";
      });
}

}  // namespace embedrt::python
