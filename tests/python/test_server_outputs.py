"""`embedrt serve` with several named outputs (Gemma 3n) and pooled bags (model2vec, EmbeddingBag),
over REST (JSON and the binary extension) and gRPC (the real tritonclient).

The oracle is not the server nor the library: every answer is compared with the bits the
reference implementations recorded in the committed fixtures: transformers' embed_tokens and
get_per_layer_inputs (tests/hf/cases/gemma3n_text), model2vec's StaticModel.encode and torch's
EmbeddingBag (tests/bags). The models are converted with `embedrt convert`.

usage: build/grpc-venv/bin/python test_server_outputs.py EMBEDRT_CLI REPO_ROOT
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException

CLI, ROOT = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
from served_model import Tally, free_port  # noqa: E402

WORK = tempfile.mkdtemp(prefix="embedrt-serve-outputs-")
tally = Tally()
check = tally.check
BITS = {"FP32": np.uint32, "BF16": np.uint16, "FP16": np.uint16}


def convert(source, out, *extra):
    subprocess.run([CLI, "convert", source, "-o", out, "-q", *extra], check=True, timeout=120)
    return out


class Server:
    def __init__(self, model, name):
        self.name, self.port, self.grpc_port = name, free_port(), free_port()
        self.proc = subprocess.Popen([CLI, "serve", model, "--name", name, "--host", "127.0.0.1", "--port",
                                      str(self.port), "--grpc-port", str(self.grpc_port)], stderr=subprocess.PIPE)
        self.client = triton.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if self.client.is_server_ready():
                    return
            except InferenceServerException:
                time.sleep(0.05)
        raise RuntimeError("server did not become ready")

    def rest(self, body, binary_header=None):
        """POST .../infer; returns (status, JSON header, {output name: raw bytes} in binary mode)."""
        headers = {"Content-Type": "application/json"}
        if binary_header is not None:
            headers["Inference-Header-Content-Length"] = str(binary_header)
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v2/models/{self.name}/infer", data=body,
                                     headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                raw, length = r.read(), r.headers.get("Inference-Header-Content-Length")
                status = r.status
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read()), {}
        if length is None:
            return status, json.loads(raw), {}
        doc, rest, data = json.loads(raw[:int(length)]), raw[int(length):], {}
        for o in doc["outputs"]:
            size = o["parameters"]["binary_data_size"]
            data[o["name"]], rest = rest[:size], rest[size:]
        return status, doc, data

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=15)
        self.client.close()


def rest_body(inputs, outputs=None, parameters=None, binary=True):
    """A KServe v2 JSON request; with binary, the outputs come back as raw bytes."""
    doc = {"inputs": [{"name": n, "datatype": d, "shape": list(np.shape(v)), "data": np.asarray(v).ravel().tolist()}
                      for n, d, v in inputs]}
    if outputs is not None:
        doc["outputs"] = [{"name": o, "parameters": {"binary_data": binary}} for o in outputs]
    if parameters:
        doc["parameters"] = parameters
    if binary and outputs is None:
        doc.setdefault("parameters", {})["binary_data_output"] = True
    return json.dumps(doc).encode()


def grpc_infer(server, inputs, outputs=None, parameters=None):
    tensors = []
    for name, datatype, value in inputs:
        t = triton.InferInput(name, list(np.shape(value)), datatype)
        t.set_data_from_numpy(np.asarray(value, dtype=np.float32 if datatype == "FP32" else np.int64))
        tensors.append(t)
    requested = [triton.InferRequestedOutput(o) for o in outputs] if outputs else None
    return server.client.infer(server.name, tensors, outputs=requested, parameters=parameters)


def grpc_bits(result, name):
    """The raw little-endian bytes of an output, as the wire carried them."""
    response = result.get_response()
    index = [o.name for o in response.outputs].index(name)
    return response.raw_output_contents[index], list(response.outputs[index].shape), response.outputs[index].datatype


def want_bits(record):
    return np.frombuffer(bytes.fromhex(record["output_hex"]), dtype=np.uint32 if record["output_dtype"] == "f32" else np.uint16)


def test_gemma3n():
    case = os.path.join(ROOT, "tests/hf/cases/gemma3n_text")
    doc = json.load(open(os.path.join(case, "expected.json")))
    model = convert(os.path.join(case, "model"), os.path.join(WORK, "gemma3n.embt"))
    server = Server(model, "gemma3n")
    try:
        run = doc["runs"][0]
        ids = np.asarray(run["input_ids"])
        recs = run["outputs"]
        # REST, binary, both outputs by default (KServe: every output when none is named).
        status, head, data = server.rest(rest_body([("input_ids", "INT64", ids)]))
        check("REST: 200 with both outputs", status == 200 and sorted(data) == sorted(recs), (status, head))
        for o in head.get("outputs", []):
            rec = recs[o["name"]]
            check(f"REST {o['name']}: shape {rec['shape']} and BF16", o["shape"] == rec["shape"] and o["datatype"] == "BF16",
                  o)
            got = np.frombuffer(data[o["name"]], dtype=np.uint16)
            check(f"REST {o['name']}: every bit of transformers' output", np.array_equal(got, want_bits(rec)))
        # One output by name.
        status, head, data = server.rest(rest_body([("input_ids", "INT64", ids)], outputs=["per_layer_inputs"]))
        check("REST outputs=[per_layer_inputs]: only that one", status == 200 and list(data) == ["per_layer_inputs"] and
              np.array_equal(np.frombuffer(data["per_layer_inputs"], np.uint16), want_bits(recs["per_layer_inputs"])), head)
        # JSON text output: bf16 values are exact in the decimal floats JSON carries.
        status, head, _ = server.rest(rest_body([("input_ids", "INT64", ids)], outputs=["inputs_embeds"], binary=False))
        values = np.asarray(head["outputs"][0]["data"], dtype=np.float64).astype(np.float32) if status == 200 else []
        check("REST JSON inputs_embeds: the bits, as decimal floats", status == 200 and np.array_equal(
            (values.view(np.uint32) >> 16).astype(np.uint16), want_bits(recs["inputs_embeds"])), head)
        # gRPC, both outputs.
        result = grpc_infer(server, [("input_ids", "INT64", ids)])
        for name, rec in recs.items():
            raw, shape, datatype = grpc_bits(result, name)
            check(f"gRPC {name}: shape, BF16 and every bit", shape == rec["shape"] and datatype == "BF16" and
                  np.array_equal(np.frombuffer(raw, np.uint16), want_bits(rec)), (shape, datatype))
        # Metadata lists both outputs with their per-token shapes.
        meta = server.client.get_model_metadata("gemma3n", as_json=True)
        shapes = {o["name"]: [int(x) for x in o["shape"]] for o in meta["outputs"]}
        check("metadata: both outputs and their shapes", shapes == {"inputs_embeds": [-1, -1, 24],
                                                                    "per_layer_inputs": [-1, -1, 2, 12]}, shapes)
        # Refusals name what is wrong, in both protocols.
        status, head, _ = server.rest(rest_body([("input_ids", "INT64", ids)], outputs=["logits"]))
        check("REST unknown output: 400 listing the outputs", status == 400 and "\"inputs_embeds\", \"per_layer_inputs\""
              in head.get("error", ""), head)
        try:
            grpc_infer(server, [("input_ids", "INT64", ids)], outputs=["logits"])
            check("gRPC unknown output: INVALID_ARGUMENT", False, "accepted")
        except InferenceServerException as e:
            check("gRPC unknown output: INVALID_ARGUMENT", e.status() == "StatusCode.INVALID_ARGUMENT" and
                  "unknown output" in e.message(), e.message())
        status, head, _ = server.rest(rest_body([("input_ids", "INT64", ids)], parameters={"padding_id": 0}))
        check("REST padding_id on per-token outputs: 400", status == 400 and "padding_id" in head.get("error", ""), head)
    finally:
        server.stop()


def test_model2vec():
    root = os.path.join(ROOT, "tests/bags/model2vec")
    manifest = json.load(open(os.path.join(root, "manifest.json")))
    m = manifest["models"]["plain"]
    model = convert(os.path.join(root, m["folder"]), os.path.join(WORK, "m2v.embt"))
    server = Server(model, "m2v")
    try:
        r = next(run for run in m["runs"] if run["normalize"])
        want = np.frombuffer(bytes.fromhex(r["output_hex"]), dtype=np.uint16)
        # [B, L] rows padded with [PAD] (id 0): each row one bag, pads left out (padding_id).
        width = max(1, max(len(s) for s in r["ids"]))
        padded = np.zeros((len(r["ids"]), width), dtype=np.int64)
        for k, sentence in enumerate(r["ids"]):
            padded[k, :len(sentence)] = sentence
        check("fixture ids never use the pad id", all(0 not in s for s in r["ids"]))
        status, head, data = server.rest(rest_body([("input_ids", "INT64", padded)], parameters={"padding_id": 0}))
        check("REST rows as bags (padding_id 0): [B, 8] FP16 equal to StaticModel.encode",
              status == 200 and head["outputs"][0]["shape"] == r["shape"] and head["outputs"][0]["datatype"] == "FP16"
              and np.array_equal(np.frombuffer(data["embeddings"], np.uint16), want), head)
        # The same bags as bag_offsets over a flat run of ids, over gRPC.
        flat = np.asarray([i for s in r["ids"] for i in s], dtype=np.int64)
        offsets = np.cumsum([0] + [len(s) for s in r["ids"]]).astype(np.int64)
        result = grpc_infer(server, [("input_ids", "INT64", flat), ("bag_offsets", "INT64", offsets)])
        raw, shape, datatype = grpc_bits(result, "embeddings")
        check("gRPC bag_offsets: equal to StaticModel.encode", shape == r["shape"] and datatype == "FP16" and
              np.array_equal(np.frombuffer(raw, np.uint16), want), (shape, datatype))
        status, head, _ = server.rest(rest_body([("input_ids", "INT64", flat), ("bag_offsets", "INT64", offsets[:-1])]))
        check("REST bag_offsets not reaching the end: 400 naming bag_offsets", status == 400 and
              head.get("error", "").startswith("bag_offsets:"), head)
    finally:
        server.stop()


def test_embedding_bag():
    root = os.path.join(ROOT, "tests/bags/embedding_bag")
    manifest = json.load(open(os.path.join(root, "manifest.json")))
    cases = [c for c in manifest["cases"] if c["path"] == "fbgemm" and c["output_dtype"] == "f32" and
             c["table"] == "f32_dim7"]
    table = next(t for t in manifest["tables"] if t["name"] == "f32_dim7")
    model = convert(os.path.join(root, table["state_dict"]), os.path.join(WORK, "bag.embt"), "--pooling", "sum")
    server = Server(model, "bag")
    try:
        check("EmbeddingBag f32 cases found", len(cases) >= 3, len(cases))
        for i, c in enumerate(cases):
            bounds = c["offsets"] if c["include_last_offset"] else c["offsets"] + [len(c["indices"])]
            inputs = [("input_ids", "INT64", np.asarray(c["indices"])), ("bag_offsets", "INT64", np.asarray(bounds))]
            if c["per_sample_weights"] is not None:
                inputs.append(("bag_weights", "FP32", np.asarray(c["per_sample_weights"], dtype=np.float32)))
            want = np.frombuffer(bytes.fromhex(c["output_hex"]), dtype=np.uint32)
            status, head, data = server.rest(rest_body(inputs, parameters={"pooling": c["mode"]}))
            check(f"REST EmbeddingBag case {i} ({c['mode']}): every bit of torch's", status == 200 and
                  np.array_equal(np.frombuffer(data.get("embeddings", b""), np.uint32), want), head)
            result = grpc_infer(server, inputs, parameters={"pooling": c["mode"]})
            raw, shape, _ = grpc_bits(result, "embeddings")
            check(f"gRPC EmbeddingBag case {i} ({c['mode']}): every bit of torch's",
                  np.array_equal(np.frombuffer(raw, np.uint32), want), shape)
        status, head, _ = server.rest(rest_body([("input_ids", "INT64", np.asarray([1, 2])),
                                                 ("bag_offsets", "INT64", np.asarray([0, 2]))],
                                                parameters={"pooling": "median"}))
        check("REST pooling 'median': 400 naming the parameter", status == 400 and "parameters 'pooling'" in
              head.get("error", ""), head)
        status, head, _ = server.rest(rest_body([("input_ids", "INT64", np.asarray([1, 2])),
                                                 ("bag_offsets", "INT64", np.asarray([0, 2])),
                                                 ("bag_weights", "FP32", np.asarray([1.0], dtype=np.float32))]))
        check("REST bag_weights of the wrong size: 400", status == 400 and "bag_weights" in head.get("error", ""), head)
    finally:
        server.stop()


def main():
    try:
        for test in (test_gemma3n, test_model2vec, test_embedding_bag):
            test()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)  # the converted models: nothing is left in /tmp
    tally.finish()


if __name__ == "__main__":
    main()
