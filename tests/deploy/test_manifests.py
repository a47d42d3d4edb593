"""tools/deploy/ checked offline: the KServe manifests against KServe's and Kubernetes' own schemas,
the promises the README makes about them, and the Dockerfile's shape (it is not built here).

usage: build/deploy-venv/bin/python test_manifests.py REPO_ROOT   (tools/setup-deploy-venv.sh)

What is checked, and by what:
- every field of the ServingRuntime and the InferenceService, at every depth, by name and type,
  against the models the KServe SDK generates from KServe's OpenAPI spec (kserve.models) and,
  for the Kubernetes types they embed (containers, probes, volumes, metadata), against the
  Kubernetes client's models: an unknown or misspelled field, or a value of the wrong type, fails;
- the runtime's containers once more, as a Pod, against the strict Kubernetes JSON schema that
  kubernetes-validate bundles (additional properties refused, enums, formats);
- embedrt's promises: liveness on /v2/health/live and readiness on /v2/health/ready of the REST
  port, the REST and gRPC ports declared and passed to `embedrt serve`, non-root with a read-only
  root filesystem, the model read from KServe's read-only /mnt/models.
Not checked (needs a cluster): admission webhooks' cross-field rules (e.g. a Serverless
InferenceService with two ports), that the image exists, that the PVC exists and holds the file.
The validator itself is shown to fail on broken copies of the manifests (the negative cases).
"""
import copy
import os
import re
import sys

import kserve.models
import kubernetes.client.models
import kubernetes_validate
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from tally import Tally  # noqa: E402

ROOT = sys.argv[1]
DEPLOY = os.path.join(ROOT, "tools", "deploy")


tally = Tally()
check = tally.check


PRIMITIVES = {"str": str, "bool": bool, "float": (int, float), "date": str, "datetime": str}


def model_class(name):
    return getattr(kserve.models, name, None) or getattr(kubernetes.client.models, name, None)


def walk(value, typename, path, errors):
    """Checks `value` (parsed YAML) against an OpenAPI-generated model type name ("list[V1Probe]",
    "dict(str, str)"; the Kubernetes client spells them "List[...]", "Dict[str, str]")."""
    if typename.startswith("List["):
        typename = "list[" + typename[5:]
    if typename.startswith("Dict["):
        typename = "dict(" + typename[5:-1] + ")"
    if typename.startswith("list["):
        if not isinstance(value, list):
            return errors.append(f"{path}: expected a list, got {type(value).__name__}")
        for i, item in enumerate(value):
            walk(item, typename[5:-1], f"{path}[{i}]", errors)
        return
    if typename.startswith("dict("):
        if not isinstance(value, dict):
            return errors.append(f"{path}: expected a map, got {type(value).__name__}")
        inner = typename[typename.index(",") + 1:-1].strip()
        for k, v in value.items():
            walk(v, inner, f"{path}.{k}", errors)
        return
    if typename == "object":  # IntOrString, Quantity, free-form
        return
    if typename == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append(f"{path}: expected an integer, got {value!r}")
        return
    if typename in PRIMITIVES:
        expected = PRIMITIVES[typename]
        if not isinstance(value, expected) or (typename != "bool" and isinstance(value, bool)):
            errors.append(f"{path}: expected {typename}, got {value!r}")
        return
    cls = model_class(typename)
    if cls is None:
        return errors.append(f"{path}: the schema names an unknown type {typename}")
    if not isinstance(value, dict):
        return errors.append(f"{path}: expected a {typename} object, got {value!r}")
    by_key = {json_key: attr for attr, json_key in cls.attribute_map.items()}
    for key, item in value.items():
        if key not in by_key:
            errors.append(f"{path}.{key}: not a field of {typename}")
            continue
        walk(item, cls.openapi_types[by_key[key]], f"{path}.{key}", errors)


KINDS = {("serving.kserve.io/v1alpha1", "ServingRuntime"): "V1alpha1ServingRuntime",
         ("serving.kserve.io/v1beta1", "InferenceService"): "V1beta1InferenceService"}


def schema_errors(doc):
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in KINDS:
        return [f"{key}: not a kind this test knows"]
    errors = []
    walk(doc, KINDS[key], doc["kind"], errors)
    if doc["kind"] == "ServingRuntime":
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "embedrt"},
               "spec": {"containers": doc["spec"].get("containers", []), "volumes": doc["spec"].get("volumes", [])}}
        try:
            kubernetes_validate.validate(pod, "1.37.0", strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"containers as a Pod (Kubernetes 1.37 strict schema): {e.message} at "
                          f"{'/'.join(map(str, e.path))}")
    return errors


def load(name):
    with open(os.path.join(DEPLOY, "kserve", name)) as f:
        return yaml.safe_load(f)


runtime, service = load("servingruntime.yaml"), load("inferenceservice.yaml")
for doc in (runtime, service):
    errors = schema_errors(doc)
    check(f"{doc['kind']} matches KServe's and Kubernetes' schemas", not errors, errors)

# The validator can fail: broken copies of the manifests are refused, each naming the field.
broken = []
r = copy.deepcopy(runtime)
r["spec"]["containers"][0]["readinesProbe"] = r["spec"]["containers"][0].pop("readinessProbe")
broken.append(("a misspelled container field", r, "readinesProbe"))
r = copy.deepcopy(runtime)
r["spec"]["supportedModelFormat"] = r["spec"].pop("supportedModelFormats")
broken.append(("a misspelled ServingRuntime field", r, "supportedModelFormat"))
r = copy.deepcopy(runtime)
r["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = "yes"
broken.append(("a string where a bool belongs", r, "runAsNonRoot"))
s = copy.deepcopy(service)
s["spec"]["predictor"]["model"]["storageURI"] = s["spec"]["predictor"]["model"].pop("storageUri")
broken.append(("a misspelled InferenceService field", s, "storageURI"))
s = copy.deepcopy(service)
s["spec"]["predictor"]["minReplicas"] = "3"
broken.append(("a string where an integer belongs", s, "minReplicas"))
for name, doc, needle in broken:
    errors = schema_errors(doc)
    check(f"negative: {name} is refused naming it", any(needle in e for e in errors), errors)

# The strict JSON schema on its own refuses what it should (it backs the walk above).
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
       "spec": {"containers": [dict(copy.deepcopy(runtime["spec"]["containers"][0]), imagePullPolcy="Always")]}}
try:
    kubernetes_validate.validate(pod, "1.37.0", strict=True)
    check("negative: the strict Kubernetes schema refuses an unknown container field", False, "accepted")
except kubernetes_validate.ValidationError as e:
    check("negative: the strict Kubernetes schema refuses an unknown container field", "imagePullPolcy" in e.message,
          e.message)

# embedrt's promises.
container = runtime["spec"]["containers"][0]
args = container["args"]


def arg(flag):
    return args[args.index(flag) + 1] if flag in args else None


ports = {p["name"]: p["containerPort"] for p in container["ports"]}
check("REST and gRPC ports declared (http1, h2c) and passed to embedrt serve",
      ports.get("http1") == int(arg("--port")) and ports.get("h2c") == int(arg("--grpc-port")), (ports, args))
check("listens on all interfaces inside the pod", arg("--host") == "0.0.0.0", args)
check("liveness probe: GET /v2/health/live on the REST port",
      container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": ports["http1"]}, container["livenessProbe"])
check("readiness probe: GET /v2/health/ready on the REST port",
      container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": ports["http1"]},
      container["readinessProbe"])
check("the model comes from KServe's read-only /mnt/models", args[0] == "serve" and args[1].startswith("/mnt/models/"),
      args)
check("model name templated from the InferenceService", arg("--name") == "{{.Name}}", args)
sc = container["securityContext"]
check("non-root, read-only root filesystem, no privilege escalation, no capabilities",
      sc["runAsNonRoot"] is True and sc["runAsUser"] != 0 and sc["readOnlyRootFilesystem"] is True and
      sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"], sc)
check("the drain fits Kubernetes' default 30 s grace period", float(arg("--drain-timeout") or 10) < 30, args)
check("both protocols announced", set(runtime["spec"]["protocolVersions"]) == {"v2", "grpc-v2"}, runtime["spec"])
predictor = service["spec"]["predictor"]
check("the InferenceService selects this runtime and format",
      predictor["model"]["runtime"] == runtime["metadata"]["name"] and
      predictor["model"]["modelFormat"]["name"] == runtime["spec"]["supportedModelFormats"][0]["name"], predictor)
check("RawDeployment (two ports; Knative allows one)",
      service["metadata"]["annotations"].get("serving.kserve.io/deploymentMode") == "RawDeployment", service["metadata"])
check("several replicas", predictor["minReplicas"] >= 2, predictor)

# The Dockerfile (documented, not built: no container engine on the test machines).
with open(os.path.join(DEPLOY, "Dockerfile")) as f:
    dockerfile = f.read()
stages = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", dockerfile, re.M)
check("multi-stage, both on Debian bookworm", len(stages) == 2 and all(s[0].startswith("debian:bookworm") for s in stages),
      stages)
check("the build stage uses the project's install script", "install-deps.sh --build" in dockerfile)
check("the run stage installs only the runtime libraries with it", "install-deps.sh --runtime" in dockerfile)
user = re.findall(r"^USER\s+(\S+)", dockerfile, re.M)
check("runs as the same non-root uid as the manifest", user and user[-1].split(":")[0] == str(sc["runAsUser"]), user)
check("exposes the manifest's ports", set(re.findall(r"^EXPOSE\s+(.*)$", dockerfile, re.M)[0].split()) ==
      {str(p) for p in ports.values()})
check("no model baked into the image", ".embt" not in re.sub(r"#.*", "", dockerfile))
with open(os.path.join(ROOT, "tools", "install-deps.sh")) as f:
    script = f.read()
runtime_libs = re.search(r"^runtime=\((.*)\)", script, re.M).group(1).split()
check("install-deps.sh --runtime names the libraries the CLI links (tbb, deflate, grpc++, protobuf)",
      {"libtbb12", "libdeflate0", "libgrpc++1.51", "libprotobuf32"} <= set(runtime_libs), runtime_libs)

tally.finish()
