"""`embedrt serve --grpc-port` with the real KServe/Triton gRPC client (tritonclient[grpc] from PyPI).

usage: build/grpc-venv/bin/python test_grpc.py EMBEDRT_CLI TOOLS_PYTHON_DIR
(tools/setup-grpc-venv.sh makes the venv.)

Every answer is checked against an oracle that is not the server: `embedrt embed` on the same
ids (bit for bit, f32 and bf16 models) and numpy's sum of the tables the test wrote.
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import json

import grpc
import ml_dtypes
import numpy as np
import tritonclient.grpc as triton
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

CLI = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from embt_writer import write_embt  # noqa: E402
from served_model import CONTEXT, DIM, VOCAB, Tally, expected, free_port, write_model  # noqa: E402

tally = Tally()
check = tally.check


def cli_embed(model, ids, start=0, segments=None):
    """`embedrt embed --json`: the CLI's numbers, printed to round-trip exactly."""
    ids = np.asarray(ids)
    args = [CLI, "embed", model, "--ids", ",".join(map(str, ids.flatten())), "--batch", str(ids.shape[0]),
            "--start", str(start), "--json"]
    if segments is not None:
        args += ["--segments", ",".join(map(str, np.asarray(segments).flatten()))]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=60).stdout
    doc = json.loads(out)
    return np.array(doc["data"], dtype=np.float64).astype(np.float32).reshape(doc["shape"])


class Server:
    def __init__(self, model, *extra, name="model"):
        self.port, self.grpc_port = free_port(), free_port()
        self.proc = subprocess.Popen([CLI, "serve", model, "--name", name, "--port", str(self.port),
                                      "--grpc-port", str(self.grpc_port), *extra], stderr=subprocess.PIPE, text=True)
        self.client = triton.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if self.client.is_server_ready():
                    return
            except InferenceServerException:
                time.sleep(0.05)
        raise RuntimeError("server did not become ready over gRPC")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.client.close()


def tensor(name, array, datatype=None):
    array = np.asarray(array)
    datatype = datatype or ("INT32" if array.dtype == np.int32 else "INT64")
    t = triton.InferInput(name, list(array.shape), datatype)
    t.set_data_from_numpy(array.astype(np.int32 if datatype == "INT32" else np.int64))
    return t


def infer(server, ids, starts=None, segments=None, dtype=np.int64, model="model", **kw):
    inputs = [tensor("input_ids", np.asarray(ids, dtype=dtype))]
    if starts is not None:
        inputs.append(tensor("position_start", np.asarray(starts, dtype=np.int64)))
    if segments is not None:
        inputs.append(tensor("token_type_ids", np.asarray(segments, dtype=np.int64)))
    return server.client.infer(model, inputs, **kw)


def error_of(fn):
    """(status name, message) of the InferenceServerException `fn` raises, or (None, result)."""
    try:
        return None, fn()
    except InferenceServerException as e:
        return e.status(), e.message()


def test_metadata(server):
    c = server.client
    check("ServerLive", c.is_server_live() is True)
    check("ServerReady", c.is_server_ready() is True)
    check("ModelReady", c.is_model_ready("model") is True and c.is_model_ready("model", "1") is True)
    meta = c.get_server_metadata()
    check("ServerMetadata", meta.name == "embedrt" and meta.version != "" and "binary_tensor_data" in meta.extensions, meta)
    meta = c.get_model_metadata("model")
    check("ModelMetadata", meta.name == "model" and list(meta.versions) == ["1"] and meta.platform == "embedrt" and
          [i.name for i in meta.inputs] == ["input_ids", "position_start", "token_type_ids"] and
          [list(i.shape) for i in meta.inputs] == [[-1, -1], [-1], [-1, -1]] and
          [(o.name, o.datatype, list(o.shape)) for o in meta.outputs] == [("embeddings", "FP32", [-1, -1, DIM])], meta)
    status, message = error_of(lambda: c.get_model_metadata("other"))
    check("ModelMetadata of an unknown model -> NOT_FOUND naming it", status == "StatusCode.NOT_FOUND" and
          "'other' is not served here" in message, (status, message))
    status, message = error_of(lambda: c.is_model_ready("model", "2"))
    check("ModelReady of an unknown version -> NOT_FOUND", status == "StatusCode.NOT_FOUND" and
          "has no version '2'" in message, (status, message))


def test_infer(server, model, seed):
    ids = [[1, 2, 3], [97, 98, 99]]
    r = infer(server, ids, request_id="r1")
    out = r.as_numpy("embeddings")
    response = r.get_response()
    check("infer: FP32 [B, L, D] with the request id", out is not None and out.dtype == np.float32 and
          out.shape == (2, 3, DIM) and response.id == "r1" and response.model_name == "model" and
          response.outputs[0].datatype == "FP32", response)
    check("infer == embedrt embed, bit for bit", out is not None and
          np.array_equal(out.view(np.uint32), cli_embed(model, ids).view(np.uint32)))
    check("infer == numpy's tok + seg + pos", np.array_equal(out, expected(seed, ids)))
    segments = [[0, 1, 1], [1, 0, 1]]
    out = infer(server, ids, starts=[5, 5], segments=segments, dtype=np.int32).as_numpy("embeddings")
    check("INT32 ids with position_start and token_type_ids == embedrt embed --start --segments",
          np.array_equal(out.view(np.uint32), cli_embed(model, ids, 5, segments).view(np.uint32)))
    out = infer(server, ids, starts=[4, 29], segments=segments).as_numpy("embeddings")
    check("a start per sequence", np.array_equal(out, expected(seed, ids, [4, 29], segments)))
    out = infer(server, np.zeros((0, 3), dtype=np.int64)).as_numpy("embeddings")
    check("an empty batch -> [0, 3, D]", out is not None and out.shape == (0, 3, DIM))
    # The requested output by name, and REST's binary answer to the same request: the same bytes.
    r = server.client.infer("model", [tensor("input_ids", np.array(ids))], outputs=[triton.InferRequestedOutput("embeddings")])
    check("an output asked for by name", np.array_equal(r.as_numpy("embeddings"), expected(seed, ids)))


def stub(server):
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    return channel, service_pb2_grpc.GRPCInferenceServiceStub(channel)


def typed_request(ids, datatype="INT64", **extra):
    ids = np.asarray(ids)
    request = service_pb2.ModelInferRequest(model_name="model", **extra)
    t = request.inputs.add(name="input_ids", datatype=datatype, shape=list(ids.shape))
    if datatype == "INT64":
        t.contents.int64_contents.extend(ids.flatten().tolist())
    else:
        t.contents.int_contents.extend(ids.flatten().tolist())
    return request


def test_typed_contents(server, seed):
    """Inputs in InferTensorContents instead of raw_input_contents (grpcio directly; tritonclient
    always sends raw)."""
    channel, s = stub(server)
    try:
        ids = [[5, 6], [7, 8]]
        for datatype in ("INT64", "INT32"):
            response = s.ModelInfer(typed_request(ids, datatype), timeout=10)
            out = np.frombuffer(response.raw_output_contents[0], dtype="<f4").reshape(list(response.outputs[0].shape))
            check(f"typed {datatype} contents", np.array_equal(out, expected(seed, ids)))
        request = typed_request(ids)
        request.raw_input_contents.append(np.asarray(ids, dtype="<i8").tobytes())
        try:
            s.ModelInfer(request, timeout=10)
            check("contents and raw_input_contents together -> INVALID_ARGUMENT", False, "accepted")
        except grpc.RpcError as e:
            check("contents and raw_input_contents together -> INVALID_ARGUMENT", e.code() == grpc.StatusCode.INVALID_ARGUMENT
                  and "inputs[0] 'input_ids'" in e.details() and "raw_input_contents" in e.details(), e.details())
        request = typed_request(ids)
        request.inputs[0].contents.Clear()
        request.inputs[0].contents.fp32_contents.extend([1.0] * 4)
        try:
            s.ModelInfer(request, timeout=10)
            check("fp32_contents for INT64 -> INVALID_ARGUMENT", False, "accepted")
        except grpc.RpcError as e:
            check("fp32_contents for INT64 -> INVALID_ARGUMENT naming the field",
                  e.code() == grpc.StatusCode.INVALID_ARGUMENT and "int64_contents, not fp32_contents" in e.details(),
                  e.details())
        request = service_pb2.ModelInferRequest(model_name="model")
        request.inputs.add(name="input_ids", datatype="INT64", shape=[1, 3])
        request.raw_input_contents.append(np.array([1, 2], dtype="<i8").tobytes())
        try:
            s.ModelInfer(request, timeout=10)
            check("raw bytes short of the shape -> INVALID_ARGUMENT", False, "accepted")
        except grpc.RpcError as e:
            check("raw bytes short of the shape -> INVALID_ARGUMENT", e.code() == grpc.StatusCode.INVALID_ARGUMENT and
                  "raw_input_contents[0] holds 16 bytes; shape and datatype need 24" in e.details(), e.details())
        try:
            s.ModelInfer(service_pb2.ModelInferRequest(model_name="model"), timeout=10)
            check("no inputs -> INVALID_ARGUMENT", False, "accepted")
        except grpc.RpcError as e:
            check("no inputs -> INVALID_ARGUMENT", e.code() == grpc.StatusCode.INVALID_ARGUMENT and
                  'no "input_ids" tensor' in e.details(), e.details())
    finally:
        channel.close()


def test_errors(server):
    """Every refusal of the protocol-neutral path, with the gRPC code its kind maps to and a message
    naming the input, worded as REST words it."""
    c = server.client
    cases = [
        ("id out of range", lambda: infer(server, [[1, 200]]), "INVALID_ARGUMENT",
         "input_ids: sequence 0, position 1: id 200 is out of range [0, 100)"),
        ("negative id", lambda: infer(server, [[1, -3]]), "INVALID_ARGUMENT", "id -3 is out of range"),
        ("position past the table", lambda: infer(server, [[1, 2]], starts=[31]), "INVALID_ARGUMENT",
         "position_start: sequence 0, position 1: position 32 is past the limit of 32 positions"),
        ("token type out of range", lambda: infer(server, [[1, 2]], segments=[[0, 5]]), "INVALID_ARGUMENT",
         "token_type_ids: sequence 0, position 1: segment 5 is out of range [0, 2)"),
        ("1-D ids", lambda: c.infer("model", [tensor("input_ids", np.array([1, 2]))]), "INVALID_ARGUMENT",
         "shape must be [batch, length]"),
        ("FP32 ids", lambda: c.infer("model", [_fp32_input()]), "INVALID_ARGUMENT", "datatype FP32 is not INT32 or INT64"),
        ("unknown input", lambda: c.infer("model", [tensor("input_ids", np.array([[1]])), tensor("mystery", np.array([[1]]))]),
         "INVALID_ARGUMENT", "inputs 'mystery': unknown input"),
        ("position_start of the wrong shape", lambda: infer(server, [[1, 2]], starts=[1, 2]), "INVALID_ARGUMENT",
         "inputs 'position_start': shape must be [1]"),
        ("more tokens than --max-batch-tokens", lambda: infer(server, [[1] * 3000]), "INVALID_ARGUMENT",
         "3000 tokens exceed --max-batch-tokens 2048"),
        ("unknown output", lambda: c.infer("model", [tensor("input_ids", np.array([[1]]))],
                                           outputs=[triton.InferRequestedOutput("logits")]), "INVALID_ARGUMENT",
         'outputs: unknown output "logits"'),
        ("unknown model", lambda: infer(server, [[1]], model="other"), "NOT_FOUND", "model 'other' is not served here"),
        ("unknown version", lambda: infer(server, [[1]], model_version="7"), "NOT_FOUND", "has no version '7'"),
        ("message over --max-body-bytes", lambda: infer(server, np.ones((1, 30000), dtype=np.int64)),
         "RESOURCE_EXHAUSTED", "200000"),
    ]
    for name, fn, code, needle in cases:
        status, message = error_of(fn)
        check(f"{name} -> {code}", status == f"StatusCode.{code}" and needle in message, (status, message))
    check("the server still answers after the refusals", np.array_equal(infer(server, [[3]]).as_numpy("embeddings"),
                                                                        expected(1, [[3]])))


def _fp32_input():
    t = triton.InferInput("input_ids", [1, 2], "FP32")
    t.set_data_from_numpy(np.array([[1, 2]], dtype=np.float32))
    return t


def test_concurrency(server, seed):
    def worker(k):
        rng = np.random.default_rng(k)
        client = triton.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        for _ in range(20):
            ids = rng.integers(0, VOCAB, (2, 5))
            out = client.infer("model", [tensor("input_ids", ids)]).as_numpy("embeddings")
            check(f"concurrent gRPC client {k}", np.array_equal(out, expected(seed, ids)),
                  "a response does not match its own request")
        client.close()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]


def test_reload(server, model):
    ids = [[5, 6, 7]]
    write_model(model, 2)
    server.proc.send_signal(signal.SIGHUP)
    deadline, ok = time.time() + 10, False
    while time.time() < deadline and not ok:
        ok = np.array_equal(infer(server, ids).as_numpy("embeddings"), expected(2, ids))
        time.sleep(0.05)
    check("SIGHUP swaps in the replaced file for gRPC too", ok)
    with open(model, "rb") as f:
        data = bytearray(f.read())
    data[8192 + 10] ^= 0xFF  # a byte of table data: caught by the checksums
    with open(model + ".tmp", "wb") as f:
        f.write(data)
    os.replace(model + ".tmp", model)
    status, message = error_of(lambda: server.client.load_model("model"))
    check("RepositoryModelLoad refuses a damaged file -> INVALID_ARGUMENT naming the checksum",
          status == "StatusCode.INVALID_ARGUMENT" and "checksum" in message and "keeps serving" in message,
          (status, message))
    check("the old model keeps serving", np.array_equal(infer(server, ids).as_numpy("embeddings"), expected(2, ids)))
    write_model(model, 3)
    server.client.load_model("model")
    check("RepositoryModelLoad swaps a good file", np.array_equal(infer(server, ids).as_numpy("embeddings"), expected(3, ids)))
    status, message = error_of(lambda: server.client.load_model("other"))
    check("RepositoryModelLoad of another model -> NOT_FOUND", status == "StatusCode.NOT_FOUND", (status, message))


def test_damaged(server, model):
    """A file rewritten in place: not ready and UNAVAILABLE naming the file, then ready again."""
    with open(model, "rb") as f:
        good = f.read()
    with open(model, "r+b") as f:  # same inode: truncate, as `cp new served` does
        f.truncate(4096)
    deadline = time.time() + 5
    while time.time() < deadline and server.client.is_model_ready("model"):
        time.sleep(0.05)
    check("rewritten in place: ModelReady false", server.client.is_model_ready("model") is False)
    check("rewritten in place: ServerReady false", server.client.is_server_ready() is False)
    status, message = error_of(lambda: infer(server, [[1]]))
    check("rewritten in place: infer -> UNAVAILABLE naming the file", status == "StatusCode.UNAVAILABLE" and
          model in message, (status, message))
    with open(model, "r+b") as f:
        f.write(good)
    deadline = time.time() + 10
    while time.time() < deadline and not server.client.is_model_ready("model"):
        time.sleep(0.1)
    check("whole again: reloaded and ready", server.client.is_model_ready("model") is True)


def test_budget(work):
    """--max-inflight-bytes 1 MiB: a request that can never fit, and requests that fit alone but
    not together (UNAVAILABLE, retry later), with the right numbers whenever they are answered."""
    model = os.path.join(work, "budget.embt")
    write_model(model, 5)
    server = Server(model, "--max-inflight-bytes", str(1 << 20), "--threads", "4")
    try:
        status, message = error_of(lambda: infer(server, np.ones((1, 70000), dtype=np.int64)))
        check("decoding more than the whole budget -> RESOURCE_EXHAUSTED", status == "StatusCode.RESOURCE_EXHAUSTED" and
              "more than --max-inflight-bytes 1048576" in message, (status, message))
        status, message = error_of(lambda: infer(server, np.ones((1, 12000), dtype=np.int64) % CONTEXT))
        check("a response larger than the whole budget -> INVALID_ARGUMENT", status == "StatusCode.INVALID_ARGUMENT" and
              "more than --max-inflight-bytes" in message, (status, message))
        rng = np.random.default_rng(0)
        ids = rng.integers(0, VOCAB, (200, 30))  # 6000 tokens: ~0.85 MiB of the budget each
        truth = expected(5, ids)
        outcomes, lock = [], threading.Lock()

        def client():
            c = triton.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
            for _ in range(5):
                status, r = error_of(lambda: c.infer("model", [tensor("input_ids", ids)]))
                with lock:
                    outcomes.append("ok" if status is None and np.array_equal(r.as_numpy("embeddings"), truth) else
                                    "busy" if status == "StatusCode.UNAVAILABLE" and "retry later" in r else
                                    f"{status}: {r}")
            c.close()
        threads = [threading.Thread(target=client) for _ in range(6)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        bad = [o for o in outcomes if o not in ("ok", "busy")]
        check("concurrent requests over the budget: each right or UNAVAILABLE 'retry later'", not bad, bad[:3])
        check("some were answered and some told to retry", "ok" in outcomes and "busy" in outcomes,
              {o: outcomes.count(o) for o in set(outcomes)})
    finally:
        server.stop()


def test_bf16(work):
    """A bf16 table answers BF16 (the model's own dtype, as REST): tritonclient reads it as
    ml_dtypes.bfloat16, with the bits `embedrt embed` prints."""
    model = os.path.join(work, "bf16.embt")
    rng = np.random.default_rng(9)
    tok = rng.standard_normal((VOCAB, 24), dtype=np.float32)
    write_embt(model, [("tok", "token", "bf16", tok)], {"model.family": "llama"})
    server = Server(model)
    try:
        meta = server.client.get_model_metadata("model")
        check("bf16 model: metadata says BF16", [(o.datatype, list(o.shape)) for o in meta.outputs] == [("BF16", [-1, -1, 24])],
              meta)
        ids = [[0, 5, 99], [42, 42, 7]]
        r = infer(server, ids)
        out = r.as_numpy("embeddings")
        check("bf16 model: BF16 output as ml_dtypes.bfloat16", r.get_response().outputs[0].datatype == "BF16" and
              out.dtype == ml_dtypes.bfloat16 and out.shape == (2, 3, 24), (r.get_response().outputs[0], out.dtype))
        cli = cli_embed(model, ids)
        check("bf16 model: bits == embedrt embed", np.array_equal(out.astype(np.float32).view(np.uint32), cli.view(np.uint32)))
        check("bf16 model: == the table rounded to bf16",
              np.array_equal(out.astype(np.float32), tok.astype(ml_dtypes.bfloat16).astype(np.float32)[np.asarray(ids)]))
    finally:
        server.stop()


def test_ports(work, model):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        r = subprocess.run([CLI, "serve", model, "--port", str(free_port()), "--grpc-port", str(port)],
                           capture_output=True, text=True, timeout=20)
        check("a taken gRPC port exits 1 naming the address and the reason", r.returncode == 1 and
              f"error: cannot listen on 127.0.0.1:{port} (gRPC): Address already in use" in r.stderr,
              (r.returncode, r.stderr))
    finally:
        taken.close()
    same = free_port()
    r = subprocess.run([CLI, "serve", model, "--port", str(same), "--grpc-port", str(same)], capture_output=True,
                       text=True, timeout=20)
    check("--grpc-port equal to --port exits 1", r.returncode == 1 and
          f"error: cannot listen on 127.0.0.1:{same} (gRPC): Address already in use" in r.stderr, (r.returncode, r.stderr))


def test_sigterm(server):
    server.proc.send_signal(signal.SIGTERM)
    code = server.proc.wait(timeout=20)
    check("SIGTERM: exit 0 with gRPC running", code == 0, code)
    try:
        socket.create_connection(("127.0.0.1", server.grpc_port), timeout=1).close()
        check("SIGTERM: the gRPC port no longer accepts", False)
    except OSError:
        check("SIGTERM: the gRPC port no longer accepts", True)


with tempfile.TemporaryDirectory() as work:
    model = os.path.join(work, "model.embt")
    write_model(model, 1)
    server = Server(model, "--max-batch-tokens", "2048", "--max-body-bytes", "200000", "--threads", "4")
    try:
        for test in (lambda: test_metadata(server), lambda: test_infer(server, model, 1),
                     lambda: test_typed_contents(server, 1), lambda: test_errors(server),
                     lambda: test_concurrency(server, 1), lambda: test_reload(server, model),
                     lambda: test_damaged(server, model), lambda: test_sigterm(server)):
            try:
                test()
            except Exception as e:
                check("test raised", False, repr(e))
    finally:
        server.stop()
    for test in (lambda: test_budget(work), lambda: test_bf16(work), lambda: test_ports(work, model)):
        try:
            test()
        except Exception as e:
            check("test raised", False, repr(e))

tally.finish()
