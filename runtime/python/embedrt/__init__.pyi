# Type stubs of the embedrt package (the module embedrt._ext is C++). Every signature here is
# checked against the runtime's by tests/python_package/test_stubs.py.
from os import PathLike
from typing import Any, Literal, Sequence, TypedDict, TypeVar, Union, overload

import numpy as np
import numpy.typing as npt

__version__: str
format_version: str

_Path = Union[str, bytes, PathLike[str], PathLike[bytes]]
# int32 or int64 values: a numpy array, a torch or jax tensor (buffer protocol or DLPack, on the
# CPU), or (nested) lists of int.
_Ints = Union[npt.ArrayLike, Any]
# "float32" / "f32", "bfloat16" / "bf16", "float16" / "f16", a numpy dtype, or a torch dtype.
_DType = Union[str, np.dtype[Any], type, Any]
_Out = TypeVar("_Out")

class Error(Exception):
    """An embedrt error: the library's message and code, and where it points."""

    code: str
    field: str | None
    file: str | None
    tensor: str | None
    offset: int | None
    sequence: int | None
    position: int | None

class InvalidArgumentError(Error, ValueError): ...
class OutOfRangeError(Error, ValueError): ...
class NotFoundError(Error, FileNotFoundError): ...
class AlreadyExistsError(Error, FileExistsError): ...
class NoSpaceError(Error, OSError): ...
class OperatingSystemError(Error, OSError): ...
class BadFileError(Error, OSError): ...
class UnsupportedError(Error, NotImplementedError): ...

class OutputInfo:
    """One output of a model."""

    @property
    def name(self) -> str: ...
    @property
    def dim(self) -> int: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> Literal["f32", "bf16", "f16"]: ...
    @property
    def pooling(self) -> Literal["none", "sum", "mean", "max"]: ...
    @property
    def normalize(self) -> bool: ...

class TableInfo(TypedDict):
    name: str
    role: str
    dtype: str
    shape: list[int]
    row_stride: int
    offset: int
    size: int
    checksum: str

class Model:
    """An opened .embt model: memory-mapped, validated, shared by every thread."""

    def __init__(self, path: _Path, residency: Literal["mmap", "populate", "copy"] = "mmap",
                 lock_in_memory: bool = False, prefetch_level: Literal["auto", "l1", "l2"] = "auto",
                 nontemporal: Literal["auto", "always", "never"] = "auto", cache_bytes: int | None = None,
                 min_rows_ahead: int | None = None) -> None: ...
    @overload
    def embed(self, ids: _Ints, *, positions: _Ints | None = None, starts: int | _Ints | None = None,
              segments: _Ints | None = None, out: _Out, dtype: _DType | None = None,
              threads: int | None = None, output: str | None = None) -> _Out: ...
    @overload
    def embed(self, ids: _Ints, *, positions: _Ints | None = None, starts: int | _Ints | None = None,
              segments: _Ints | None = None, out: None = None, dtype: _DType | None = None,
              threads: int | None = None, output: str | None = None) -> Any:
        """A numpy array, or a torch tensor when dtype is a torch dtype."""
    @overload
    def embed(self, ids: _Ints, *, positions: _Ints | None = None, starts: int | _Ints | None = None,
              segments: _Ints | None = None, out: dict[str, Any] | None = None, dtype: _DType | None = None,
              threads: int | None = None, output: Sequence[str]) -> dict[str, Any]:
        """Several outputs: a dict of arrays by output name."""
    def pool(self, ids: _Ints, offsets: _Ints | None = None, *, weights: npt.ArrayLike | None = None,
             mode: Literal["sum", "mean", "max"] | None = None, normalize: bool | None = None,
             padding_id: int | None = None, out: Any = None, dtype: _DType | None = None, threads: int | None = None,
             output: str | Sequence[str] | None = None) -> Any:
        """[bags] + the output's per-token shape (a dict by name with several outputs)."""
    def prefetch(self, ids: _Ints, *, output: str | Sequence[str] | None = None, page_in: bool = False) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def dim(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def max_positions(self) -> int | None: ...
    @property
    def table_dtype(self) -> Literal["f32", "bf16", "f16", "int8", "int4"]: ...
    @property
    def isa(self) -> str: ...
    @property
    def prefetch_levels(self) -> dict[str, Literal["l1", "l2"]]: ...
    @property
    def min_rows_ahead(self) -> dict[str, int]: ...
    @property
    def metadata(self) -> dict[str, str | int | float]: ...
    @property
    def outputs(self) -> list[OutputInfo]: ...
    @property
    def tables(self) -> list[TableInfo]: ...
    @property
    def closed(self) -> bool: ...
    def verify(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Model: ...
    def __exit__(self, type: object | None, value: object | None, traceback: object | None) -> None: ...

class ConvertedTable(TypedDict):
    name: str
    role: str
    dtype: str
    shape: list[int]
    exact: bool
    max_abs_error: float
    mean_abs_error: float
    rms_error: float

class ConvertReport(TypedDict):
    path: str
    recipe: str
    evidence: str
    rules: str | None
    table_dtype: str
    tables: list[ConvertedTable]

def convert(src: _Path | Sequence[_Path], dst: _Path, *, dtype: str = "native", preset: str = "auto",
            force: bool = False, config: _Path | None = None, ignore_config: bool = False, key: str | None = None,
            token: str | None = None, position: str | None = None, segment: str | None = None,
            norm_weight: str | None = None, norm_bias: str | None = None, norm_eps: float | None = None,
            positions: Literal["sinusoidal"] | None = None, context: int | None = None,
            allow_overflow: bool = False, check_crc: bool = True,
            pooling: Literal["sum", "mean", "max"] | None = None, normalize: bool | None = None) -> ConvertReport: ...
def inspect(path: _Path) -> dict[str, Any]: ...
def verify(path: _Path) -> None: ...
def isa() -> str: ...
def supported_isas() -> list[str]: ...
def install_fault_guard() -> None: ...
