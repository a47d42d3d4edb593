"""Fails when a lambda of a kernel's loop was compiled as a function of its own.

usage: check_inlined_lambdas.py NM LIBRARY   (a Release build of libembedrt.a, GCC)

The kernels (runtime/kernels/*.inl) build their loops from lambdas and mark those that run per
row or per vector always_inline. One left unmarked is inlined or not at GCC's whim, and when it
is not, its loop
reads every captured pointer and scale from memory once a vector, because the output's byte
stores may alias them: 6bb08f9 added two such lambdas, GCC outlined them for int4 rows and for
int8 rows into bf16, and those gathers ran at 0.52-0.85x until 63fed59 marked them. No timed test
could have said so; the symbol table does. Every ISA unit's namespace is checked (the L2 sets'
too); anything outside embedrt::kernels::<unit>:: is not a kernel's loop.
"""
import re
import subprocess
import sys

nm, library = sys.argv[1], sys.argv[2]
symbols = subprocess.run([nm, "-C", "--defined-only", library], capture_output=True, text=True, check=True).stdout
definition = re.compile(r"^[0-9a-f]+ [tTwW] (.*)$")
unit = re.compile(r"embedrt::kernels::[a-z0-9_]+::")


def in_kernel_unit(name):
    # A template function's demangled name may begin with its return type ("auto ", "void ",
    # "std::byte const* "), never with a '<' or '(': a kernel name inside another function's
    # template arguments (oneTBB's task types over KernelArgs) is not a kernel function.
    m = unit.search(name)
    return m is not None and "<" not in name[:m.start()] and "(" not in name[:m.start()]


kernel_symbols = [m.group(1) for line in symbols.splitlines() if (m := definition.match(line)) and in_kernel_unit(m.group(1))]
gathers = [s for s in kernel_symbols if "embed_tokens<" in s]
if not gathers:
    sys.exit(f"check_inlined_lambdas: no kernel's embed_tokens in {library}: is this the library?")
# A lambda's own body is "...::{lambda(...)#N}::operator()..." (or its static thunk _FUN); a
# function that merely takes a lambda as a template argument names it inside its '<...>'.
lambda_body = re.compile(r"\{lambda\([^{}]*\)#\d+\}::(operator\(\)|_FUN)")
outlined = [s for s in kernel_symbols if lambda_body.search(s)]
for s in outlined:
    print("outlined:", s[:400])
print(f"{len(kernel_symbols)} kernel functions, {len(gathers)} gathers, {len(outlined)} outlined lambdas")
sys.exit(1 if outlined else 0)
