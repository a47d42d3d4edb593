#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + ASan + UBSan, seeds each from the project's fixtures
# and malformed corpus, and runs each for a bounded time (default 20 s; FUZZ_SECONDS=N to change).
# A crash leaves its input in build/fuzz/findings/ (or the EMBEDRT_FUZZ_BUILD directory's) and fails
# the script.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh
source tools/python-env.sh
seconds=${FUZZ_SECONDS:-20}
targets=(zip pickle safetensors embt config embedder grpc_request)
# EMBEDRT_FUZZ_BUILD=DIR uses a build directory already configured by clang with
# -DEMBEDRT_BUILD_FUZZERS=ON -DEMBEDRT_SANITIZE=address,undefined (tools/test.sh's sanitizer suite,
# which then need not compile the kernels a second time); otherwise build/fuzz is configured here.
if [ -n "${EMBEDRT_FUZZ_BUILD:-}" ]; then
  build=$EMBEDRT_FUZZ_BUILD
  grep -q '^EMBEDRT_BUILD_FUZZERS:BOOL=ON$' "$build/CMakeCache.txt" ||
    { echo "fuzz.sh: $build is not configured with -DEMBEDRT_BUILD_FUZZERS=ON" >&2; exit 2; }
else
  build=build/fuzz
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DEMBEDRT_BUILD_FUZZERS=ON -DEMBEDRT_SANITIZE=address,undefined -DEMBEDRT_ISAS=host -DEMBEDRT_PREFETCH_L2_KERNELS=OFF \
    -DEMBEDRT_BUILD_TOOLS=OFF -DEMBEDRT_BUILD_TESTS=OFF -DEMBEDRT_BUILD_BENCHMARKS=OFF -DEMBEDRT_INSTALL=OFF >/dev/null
fi
cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]/#/fuzz_}"

# Seeds: the external fixtures, the malformed corpus, and fresh files from the project's writers.
seeds=$build/seeds
rm -rf "$seeds" && mkdir -p "${targets[@]/#/$seeds/}" "$build/findings"
for f in tests/fixtures/external/*.pt* tests/corpus/files/*.pt; do
  [ -f "$f" ] && cp "$f" "$seeds/zip/" || true
done
for f in tests/fixtures/external/*.safetensors tests/corpus/files/*.safetensors; do
  [ -f "$f" ] && cp "$f" "$seeds/safetensors/" || true
done
# config.json seeds: every committed tiny Hugging Face model's config (tests/hf/cases).
for f in tests/hf/cases/*/model/config.json; do
  [ -f "$f" ] && cp "$f" "$seeds/config/$(basename "$(dirname "$(dirname "$f")")").json" || true
done
echo '{"model_type": "gpt2", "vocab_size": 8, "n_embd": 4}' > "$seeds/config/minimal.json"
"$EMBEDRT_TORCH_PYTHON" - "$seeds" <<'PY'
import sys, zipfile, glob, os
seeds = sys.argv[1]
for path in glob.glob(f"{seeds}/zip/*"):
    try:
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if name.endswith("data.pkl"):
                    open(f"{seeds}/pickle/{os.path.basename(path)}.pkl", "wb").write(z.read(name))
    except Exception:
        pass
sys.path.insert(0, "tools/python")
import numpy as np
from embt_writer import write_embt
rng = np.random.default_rng(0)
write_embt(f"{seeds}/embt/gpt2.embt", [("tok", "token", "f32", rng.standard_normal((16, 5), dtype=np.float32)),
           ("pos", "position", "f16", rng.standard_normal((8, 5), dtype=np.float32))],
           {"model.family": "gpt2", "position.kind": "learned", "context_length": 8})
PY

# gRPC ModelInferRequest seeds, encoded from protobuf text by Debian's protoc: raw and typed
# contents, every input, a mismatch.
encode() { protoc --proto_path=tools/serve --encode=inference.ModelInferRequest tools/serve/kserve_grpc.proto > "$seeds/grpc_request/$1"; }
printf '%s' 'model_name: "m" inputs { name: "input_ids" datatype: "INT64" shape: [2, 2] } raw_input_contents: "\001\0\0\0\0\0\0\0\002\0\0\0\0\0\0\0\003\0\0\0\0\0\0\0\004\0\0\0\0\0\0\0"' | encode raw
printf '%s' 'model_name: "m" inputs { name: "input_ids" datatype: "INT32" shape: [1, 3] contents { int_contents: [1, 2, 3] } } inputs { name: "position_start" datatype: "INT64" shape: [1] contents { int64_contents: [5] } } inputs { name: "token_type_ids" datatype: "INT64" shape: [1, 3] contents { int64_contents: [0, 1, 0] } } outputs { name: "embeddings" }' | encode typed
printf '%s' 'inputs { name: "input_ids" datatype: "INT64" shape: [1, 2] contents { fp32_contents: [1.0, 2.0] } }' | encode mismatch

status=0
for target in "${targets[@]}"; do
  echo "==> fuzz_$target for ${seconds}s"
  if ! "$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
       -rss_limit_mb=4096 -artifact_prefix="$build/findings/${target}-" "$seeds/$target" 2>"$build/fuzz_$target.log"; then
    echo "fuzz_$target FAILED: see $build/fuzz_$target.log and $build/findings/" >&2
    tail -40 "$build/fuzz_$target.log" >&2
    status=1
  else
    grep -E "^#[0-9]+.*DONE" "$build/fuzz_$target.log" | tail -1 || true
  fi
done
exit $status
