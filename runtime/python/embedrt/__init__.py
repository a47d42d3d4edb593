"""embedrt: token embeddings at memory-bus speed.

    import embedrt
    model = embedrt.Model("gpt2.embt")               # maps and validates the file: O(1)
    x = model.embed([[464, 2068, 7586]])             # numpy float32, shape [1, 3, 768]
    model.embed(ids, starts=cached_lengths, out=buf) # decode step: writes into buf, no allocation

The work runs in the C++ library with the GIL released; README.md ("Python") says more.
"""
from ._errors import (AlreadyExistsError, BadFileError, Error, InvalidArgumentError, NoSpaceError, NotFoundError,
                      OperatingSystemError, OutOfRangeError, UnsupportedError)
from ._ext import (Model, OutputInfo, __version__, convert, format_version, inspect, install_fault_guard, isa,
                   supported_isas, verify)

__all__ = [
    "Model", "OutputInfo", "convert", "inspect", "verify", "isa", "supported_isas", "install_fault_guard",
    "format_version", "__version__",
    "Error", "InvalidArgumentError", "OutOfRangeError", "NotFoundError", "AlreadyExistsError", "NoSpaceError",
    "OperatingSystemError", "BadFileError", "UnsupportedError",
]
