"""No symbol compiled with wider instruction-set flags may be visible to baseline code.

Each kernel unit (runtime/kernels/kernel_<isa>.cpp) is compiled with the -m flags of its row in
runtime/kernels/isa_table.def. If it defined an externally visible symbol that another object
also defines (an inline function such as std::max, emitted as a weak symbol), the linker would
keep one copy -- possibly the AVX-512 one -- and a baseline caller would crash with SIGILL on an
older CPU. This checks, with nm, that a kernel unit defines only
  - its accessor, embedrt::kernels::<isa>_kernels(),
  - names in its own namespace embedrt::kernels::<isa>::, and
  - xsimd templates instantiated for its own architecture types,
and that none of those is also defined by any other object of the library.
It runs on the library as built and on the kernel units compiled at -O0 (nothing inlined, so
every helper they call is emitted).

usage: check_kernel_symbols.py LIBRARY.a [KERNEL_OBJECT.o ...]
"""
import re
import subprocess
import sys

ISAS = ("scalar", "sse42", "avx2", "avx512", "avx512bf16")


def defined_symbols(path):
    """{object member: {demangled symbol}} of externally visible definitions."""
    out = subprocess.run(["nm", "-A", "-C", "--defined-only", "--extern-only", path], capture_output=True,
                         text=True, check=True).stdout
    members = {}
    for line in out.splitlines():
        m = re.match(r"^(.*?):?\s*([0-9a-f]+) (\w) (.*)$", line)  # "lib.a:member.o:0000 T name"
        if m:
            members.setdefault(m.group(1), set()).add(m.group(4))
    return members


def unit_of(location):
    m = re.search(r"kernel_(" + "|".join(ISAS) + r")\.cpp\.o", location)
    return m.group(1) if m else None


def allowed(isa, symbol):
    return (symbol == f"embedrt::kernels::{isa}_kernels()" or symbol.startswith(f"embedrt::kernels::{isa}::") or
            symbol.startswith("DW.ref.__gxx_personality") or "xsimd::" in symbol.split("(")[0])


def main():
    library, extra = sys.argv[1], sys.argv[2:]
    members = defined_symbols(library)
    baseline = {}
    for location, symbols in members.items():
        if unit_of(location) in (None, "scalar"):
            for s in symbols:
                baseline.setdefault(s, location)
    problems = []
    kernel_objects = dict(members)
    for path in extra:
        kernel_objects.update({f"-O0 {k}": v for k, v in defined_symbols(path).items()})
    seen = {}
    checked = 0
    for location, symbols in kernel_objects.items():
        isa = unit_of(location)
        if isa in (None, "scalar"):
            continue
        checked += 1
        for s in sorted(symbols):
            if s.startswith("DW.ref.__gxx_personality"):
                continue
            if not allowed(isa, s):
                problems.append(f"{location}: exports '{s}', compiled with {isa} flags")
            if s in baseline:
                problems.append(f"{location}: '{s}' is also defined by baseline object {baseline[s]}")
            other = seen.get(s)
            if other and unit_of(other) != isa:
                problems.append(f"{location}: '{s}' is also defined by {other}")
            seen.setdefault(s, location)
    for p in problems:
        print("FAIL", p)
    if checked < len(ISAS) - 1:
        print(f"FAIL only {checked} wider-ISA kernel objects found in {library} and {extra}")
        problems.append("objects missing")
    print(f"{checked} kernel objects checked")
    print(f"{checked - min(checked, len(problems))} passed, {len(problems)} failed")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
