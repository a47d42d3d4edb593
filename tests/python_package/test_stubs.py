"""The type stubs (embedrt/__init__.pyi) say what the module does: every public name, every
parameter's name, kind and default, every property, as the C++ module declares them."""
import ast
import pathlib

import embedrt

STUB = pathlib.Path(embedrt.__file__).with_name("__init__.pyi")


def stub_tree():
    return ast.parse(STUB.read_text())


def parameters(function):
    """(positional names, keyword-only names, defaults by name) of a def node."""
    args = function.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    defaults = {a.arg: ast.literal_eval(d) for a, d in zip(args.args[len(args.args) - len(args.defaults):], args.defaults)}
    defaults.update({a.arg: ast.literal_eval(d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    return positional, [a.arg for a in args.kwonlyargs], defaults


def runtime_parameters(function):
    """The same, from nanobind's signature of a bound C++ function."""
    [(text, _doc, defaults)] = function.__nb_signature__
    for i, value in reversed(list(enumerate(defaults or ()))):  # \\10 before \\1
        text = text.replace(f"\\{i}", repr(value))
    return parameters(ast.parse(text + ": pass").body[0])


def stub_functions(body):
    found = {}
    for node in body:
        if isinstance(node, ast.FunctionDef):
            found.setdefault(node.name, []).append(node)
    return found


def test_every_public_name_has_a_stub():
    names = {n.name for n in stub_tree().body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {n.target.id for n in stub_tree().body if isinstance(n, ast.AnnAssign)}
    assert set(embedrt.__all__) <= names, set(embedrt.__all__) - names


def test_functions_match_the_module():
    functions = stub_functions(stub_tree().body)
    for name in ("convert", "inspect", "verify", "isa", "supported_isas", "install_fault_guard"):
        [stub] = functions[name]
        assert parameters(stub) == runtime_parameters(getattr(embedrt, name)), name


def test_model_matches_the_module():
    [model] = [n for n in stub_tree().body if isinstance(n, ast.ClassDef) and n.name == "Model"]
    methods = stub_functions(model.body)
    properties = {name for name, nodes in methods.items() if any(
        isinstance(d, ast.Name) and d.id == "property" for node in nodes for d in node.decorator_list)}
    runtime_public = {n for n in dir(embedrt.Model) if not n.startswith("_")}
    assert runtime_public == {n for n in methods if not n.startswith("_")}
    assert properties == {n for n in runtime_public if isinstance(getattr(embedrt.Model, n), property)}
    for name in ("__init__", "embed", "verify", "close", "__enter__", "__exit__"):
        runtime = runtime_parameters(getattr(embedrt.Model, name))
        for stub in methods[name]:
            positional, keyword, defaults = parameters(stub)
            assert (positional, keyword) == runtime[:2], name
            if len(methods[name]) == 1:
                assert defaults == runtime[2], name


def test_output_info_matches_the_module():
    [info] = [n for n in stub_tree().body if isinstance(n, ast.ClassDef) and n.name == "OutputInfo"]
    assert {n.name for n in info.body if isinstance(n, ast.FunctionDef)} == {
        n for n in dir(embedrt.OutputInfo) if not n.startswith("_")}
