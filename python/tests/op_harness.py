"""The machinery of the per-op numeric suite (``test_ops.py``): sample inputs, graph building,
compiling and comparing against eager PyTorch.

A *sample* is a few input tensors plus a function ``fn(op, *inputs)`` that calls the ATen
overload under test (maybe several times, with literal Python scalars and keyword variants, so
that one compiled graph covers several cases). The graph is traced with ``make_fx`` in fake mode,
so every tensor is a graph input (nothing folds away) and keeps its strides; rows for
CompositeImplicitAutograd overloads, which ``make_fx`` would decompose, build the graph with
``torch.fx.symbolic_trace`` and fill in FakeTensor metadata instead. Either way the graph must
contain only the overload under test, so its lowering (not a decomposition) is what runs.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import fxmlir
import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

f32, f64, f16, bf16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
i64, i32, i8, u8, b8 = torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool

FLOATS = (f32, f64, f16, bf16)
INTS = (i64, i32, i8, u8)
ALL = FLOATS + INTS + (b8,)
NO_BOOL = FLOATS + INTS

NAME = {
    f32: "float32",
    f64: "float64",
    f16: "float16",
    bf16: "bfloat16",
    i64: "int64",
    i32: "int32",
    i8: "int8",
    u8: "uint8",
    b8: "bool",
}


def compiled_and_eager(
    fn: Callable, shapes: Sequence[Sequence[int]], dtype: torch.dtype, dump_dir: Any, **config: Any
) -> tuple[Any, Any]:
    """``fn`` compiled by fxmlir (dumping into ``dump_dir``, with ``config`` patched) and run
    eagerly, on seeded normal inputs of ``shapes``: ``(compiled result, eager result)``. Nothing
    may fall back to eager PyTorch (strict mode), so the result is always the kernel's."""
    torch.manual_seed(0)
    args = [torch.randn(s, dtype=dtype) for s in shapes]
    torch._dynamo.reset()
    with torch.no_grad():
        expected = fn(*args)
        with fxmlir.config.patch(dump_dir=str(dump_dir), **{"fallback": "error", **config}):
            actual = torch.compile(fn, backend="fxmlir")(*args)
    return actual, expected


def tolerance(dtype: torch.dtype, *tables: dict | None) -> tuple[float, float]:
    """(atol, rtol) for an output dtype: the first table naming it, else exact."""
    for table in tables:
        if table and dtype in table:
            return table[dtype]
    return (0.0, 0.0)


# ---- inputs -------------------------------------------------------------------------------

_gen = torch.Generator().manual_seed(0)


def reseed(seed: int) -> None:
    _gen.manual_seed(seed)


def mk(
    shape: Sequence[int],
    dtype: torch.dtype,
    low: float = -3,
    high: float = 3,
    *,
    integral: bool = False,
    nonzero: bool = False,
) -> torch.Tensor:
    """Random values in [low, high] (clipped to the dtype's range); ``integral`` floats are
    whole numbers (so comparisons and ties have hits); ``nonzero`` replaces zeros by one."""
    shape = list(shape)
    if dtype == b8:
        t = torch.randint(0, 2, shape, generator=_gen).bool()
        return t | torch.ones_like(t) if nonzero else t
    if dtype.is_floating_point and not integral:
        t = torch.empty(shape, dtype=f64).uniform_(low, high, generator=_gen)
    else:
        info = torch.iinfo(dtype) if not dtype.is_floating_point else None
        lo = int(math.ceil(low)) if info is None else max(int(math.ceil(low)), info.min)
        hi = int(math.floor(high)) if info is None else min(int(math.floor(high)), info.max)
        t = torch.randint(lo, hi + 1, shape, generator=_gen, dtype=i64)
    if nonzero:
        t = torch.where(t == 0, torch.ones_like(t), t)
    return t.to(dtype)


def transposed(shape: Sequence[int], dtype: torch.dtype, *a, **k) -> torch.Tensor:
    """A non-contiguous [m, n] view: the transpose of a contiguous [n, m] tensor."""
    m, n = shape
    return mk([n, m], dtype, *a, **k).t()


def sliced(shape: Sequence[int], dtype: torch.dtype, *a, **k) -> torch.Tensor:
    """A non-contiguous view with a storage offset: every other column, starting at column 1."""
    *lead, n = shape
    return mk([*lead, 2 * n + 1], dtype, *a, **k)[..., 1::2]


def expanded(shape: Sequence[int], dtype: torch.dtype, *a, **k) -> torch.Tensor:
    """A stride-0 view: one row (one element, for 1-D) broadcast to ``shape``."""
    base = [1] if len(shape) == 1 else [1] * (len(shape) - 1) + [shape[-1]]
    return mk(base, dtype, *a, **k).expand(*shape)


def tensor(values: Any, dtype: torch.dtype) -> torch.Tensor:
    """A tensor of literal values; for integer dtypes non-finite floats become 0, so that a
    float sample can also be built (e.g. to probe whether eager accepts the dtype)."""
    if dtype.is_floating_point:
        return torch.tensor(values, dtype=f64).to(dtype)

    def clean(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return int(v) if math.isfinite(v) else 0

    return torch.tensor(clean(values), dtype=i64).to(dtype)


def float_specials(dtype: torch.dtype) -> list[float]:
    """Edge values of a float type: signed zeros, infinities, NaN, the largest and smallest
    normal magnitudes, a subnormal, and ordinary values around 1."""
    info = torch.finfo(dtype)
    big = float(info.max) / 2
    return [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        3.0,
        7.25,
        -0.75,
        big,
        -big,
        float(info.tiny),
        -float(info.tiny),
        float(info.tiny) / 4,
        math.inf,
        -math.inf,
        math.nan,
        1e-3,
        100.0,
    ]


def int_specials(dtype: torch.dtype) -> list[int]:
    if dtype == b8:
        return [0, 1, 1, 0]
    info = torch.iinfo(dtype)
    return [0, 1, -1, 2, -7, 7, 100, -100, info.max, info.min, info.max - 1, info.min + 1]


def specials(dtype: torch.dtype) -> torch.Tensor:
    """1-D tensor of edge values for ``dtype`` (integer values wrap into unsigned range)."""
    if dtype.is_floating_point:
        return tensor(float_specials(dtype), dtype)
    values = int_specials(dtype)
    if dtype == u8:
        values = [v % 256 for v in values]
    return tensor(values, dtype)


# ---- samples and rows ---------------------------------------------------------------------


@dataclasses.dataclass
class Sample:
    """Inputs and a call. ``fn(op, *inputs)`` returns a tensor or a tuple of tensors."""

    id: str
    inputs: list[torch.Tensor]
    fn: Callable[..., Any]
    #: For a merged sample, the samples it is made of (to name each output's origin).
    parts: list[Sample] = dataclasses.field(default_factory=list)


def merge(sample_id: str, samples: Sequence[Sample | None]) -> list[Sample]:
    """One sample (one compiled graph) made of several: their inputs side by side, their
    outputs one after the other. Cuts compile time; failures still name the part."""
    parts = [s for s in samples if s is not None]
    if not parts:
        return []
    counts = [len(p.inputs) for p in parts]

    def fn(op: Any, *xs: Any) -> tuple[Any, ...]:
        out, start = [], 0
        for part, n in zip(parts, counts):
            out.append(part.fn(op, *xs[start : start + n]))
            start += n
        return tuple(out)

    return [Sample(sample_id, [x for p in parts for x in p.inputs], fn, parts)]


@dataclasses.dataclass
class Row:
    op: str
    #: The dtypes PyTorch defines the op for (among ``ALL``), each tested.
    dtypes: tuple[torch.dtype, ...]
    #: Samples for one dtype. The first sample is also the probe of which dtypes eager accepts.
    samples: Callable[[torch.dtype], list[Sample]]
    #: Tolerance (atol, rtol) by output dtype; dtypes it does not name compare exactly.
    tol: dict
    #: Fixed-dtype samples: type promotion and mixed dtypes (run once, under the label "mixed").
    mixed: Callable[[], list[Sample]] | None = None
    #: Why the graph is built by symbolic tracing instead of make_fx (None: make_fx).
    direct: str | None = None
    #: Why output values are not compared (None: they are). Such outputs (``empty``) are
    #: checked for shape, dtype and strides only.
    unspecified: str | None = None
    #: Why the sign of a zero result is not compared (None: it is).
    zero_signs: str | None = None
    #: Why eager runs on half-precision inputs widened to float64, its result rounded back to
    #: their dtype (None: eager runs on the inputs as given).
    widened: str | None = None
    #: Ops the samples' graphs call beside the row's own, and why (a collective's
    #: ``wait_tensor``); None: the row's op only.
    companions: tuple[tuple[str, ...], str] | None = None
    #: Samples (by id) whose graphs traced with symbolic sizes compile per size, and why;
    #: the others compile into one kernel for every size.
    per_size: dict[str, str] | None = None


def one_rank_group() -> str:
    """The name of this process's default process group, made on first use: one rank (gloo,
    an in-memory store), so that collectives run in a test process. Never torn down."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.group.WORLD.group_name


def overload(name: str) -> torch._ops.OpOverload:
    ns, op, variant = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), op), variant)


def _flat(value: Any) -> list[Any]:
    """Outputs as a flat list: ops such as var_mean return tuples, samples tuples of them."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flat(item)]
    return [value]


def _call(op: Any, sample: Sample, inputs: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(_flat(sample.fn(op, *inputs)))


def build_graph(row: Row, sample: Sample) -> torch.fx.GraphModule:
    op = overload(row.op)
    fn = lambda *xs: _call(op, sample, xs)  # noqa: E731
    if row.direct is None:
        gm = make_fx(fn, tracing_mode="fake")(*sample.inputs)
    else:
        names = [f"x{i}" for i in range(len(sample.inputs))]
        src = f"def f({', '.join(names)}):\n    return fn({', '.join(names)})\n"
        scope: dict[str, Any] = {"fn": fn}
        exec(src, scope)  # noqa: S102 - a positional-argument wrapper for symbolic_trace
        gm = torch.fx.symbolic_trace(scope["f"])
        mode = FakeTensorMode()
        FakeTensorProp(gm, mode).propagate(*[mode.from_tensor(x) for x in sample.inputs])
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    allowed = set(row.companions[0]) if row.companions else set()
    others = {str(t) for t in targets if t is not op and t is not operator.getitem} - allowed
    assert op in targets, f"the traced graph does not call {row.op}:\n{gm.graph}"
    assert not others, f"the traced graph calls {sorted(others)} besides {row.op}:\n{gm.graph}"
    return gm


def eager(row: Row, sample: Sample) -> list[Any]:
    halves = {x.dtype for x in sample.inputs if x.dtype in (torch.float16, torch.bfloat16)}
    if row.widened is None or len(halves) != 1:
        return list(_call(overload(row.op), sample, sample.inputs))
    (half,) = halves
    inputs = [x.double() if x.dtype == half else x for x in sample.inputs]
    out = _call(overload(row.op), sample, inputs)
    return [t.to(half) if isinstance(t, torch.Tensor) and t.dtype == f64 else t for t in out]


def _data_inputs(sample: Sample) -> list[int]:
    """The positions of the sample's data inputs: in the sample or each of its parts (when
    merged), the first input and those of its rank and first size (a grid sampler's grid)."""
    positions, at = [], 0
    for part in sample.parts or [sample]:
        first = part.inputs[0]
        positions += [
            at + k
            for k, x in enumerate(part.inputs)
            if x.dim() == first.dim() and x.dim() and len(x) == len(first)
        ]
        at += len(part.inputs)
    return positions


def check_batch(row: Row, samples: Sequence[Sample]) -> int:
    """Compiles each sample through Dynamo twice, at fixed sizes and with the batch (first
    size) of its data inputs dynamic, and calls both with each data input repeated along the
    batch twice and three times (every other copy reversed along it). The dynamic graph must
    give what the fixed-size ones give (both see Dynamo's decompositions, which test_op's
    graphs do not), or fail as they fail; one whose batch stayed symbolic (Dynamo may still
    fix it) must compile into one kernel for every batch. Returns how many did."""
    from fxmlir import backend

    op = overload(row.op)
    dynamic = 0
    settings = {"fallback": "error", "background": False, "specializations": 0}
    for sample in samples:
        data = [i for i in _data_inputs(sample) if len(sample.inputs[i])]
        if not data:
            continue

        def fn(*xs, sample=sample):
            return _call(op, sample, xs)

        def repeated(x: torch.Tensor, copies: int) -> torch.Tensor:
            return torch.cat([x.flip(0) if k % 2 else x for k in range(copies)])

        def run(compiled: Any, inputs: list[torch.Tensor]) -> Any:
            try:
                with fxmlir.config.patch(**settings):
                    return compiled(*inputs)
            except Exception as error:  # noqa: BLE001 - compared with the other graph's
                return type(error)

        batches = [
            [repeated(x, copies) if i in data else x for i, x in enumerate(sample.inputs)]
            for copies in (2, 3)
        ]
        start = max((r.seq for r in backend.history), default=-1)
        compiled = torch.compile(fn, backend="fxmlir", dynamic=False)
        got = []
        for inputs in batches:
            marked = [x.clone() for x in inputs]
            for i in data:
                torch._dynamo.maybe_mark_dynamic(marked[i], 0)
            got.append(run(compiled, marked))
        records = [r for r in backend.history if r.seq > start]
        for copies, inputs, result in zip((2, 3), batches, got, strict=True):
            torch._dynamo.reset()
            expected = run(torch.compile(fn, backend="fxmlir", dynamic=False), inputs)
            where = f"{row.op} [{sample.id}] x{copies}"
            if isinstance(expected, type) or isinstance(result, type):
                assert result == expected, f"{where}: {result} at a dynamic batch, {expected} fixed"
                continue
            for i, (g, e) in enumerate(zip(result, expected, strict=True)):
                _assert_close(row, g, e, f"{where} output {i}")
        if any(r.symbols for r in records):
            assert len(records) == 1, f"{row.op} [{sample.id}]: {records}"
            dynamic += 1
        torch._dynamo.reset()
    return dynamic


def check_symbolic(row: Row, samples: Sequence[Sample]) -> int:
    """Compiles the samples' graphs traced with symbolic sizes (``make_fx``'s symbolic mode:
    sizes 0 and 1 stay fixed) and compares each with eager; each graph with symbolic sizes
    must compile into a kernel for every size, unless a symbol is only an input's stride (a
    slice of a wider tensor: the kernel could not read it, so it compiles per size). Returns
    how many compiled into a kernel for every size."""
    from fxmlir import backend, interchange

    op = overload(row.op)
    dynamic = 0
    for sample in samples:
        fn = lambda *xs, sample=sample: _call(op, sample, xs)  # noqa: E731
        gm = make_fx(fn, tracing_mode="symbolic")(*sample.inputs)
        try:
            plan = interchange.export(gm, "probe", interchange.Symbolic())
            symbolic = bool(plan.document.get("symbols")) and sample.id not in (row.per_size or {})
        except fxmlir.UnsupportedOpError as e:
            # A symbol the kernel cannot read (only an input's stride), or a size that is no
            # expression the interchange writes (a true division): compiled per size.
            assert "no input's dimension" in str(e) or "no integer expression" in str(e), e
            symbolic = False
        dynamic += symbolic
        start = max((r.seq for r in backend.history), default=-1)
        with fxmlir.config.patch(fallback="error", background=False):
            got = fxmlir.compile_graph(gm, sample.inputs)(list(sample.inputs))
        records = [r for r in backend.history if r.seq > start]
        assert [bool(r.symbols) for r in records] == [symbolic], (
            f"{row.op} [{sample.id}]: not one kernel for every size: {records}"
        )
        for i, (g, e) in enumerate(zip(got, eager(row, sample), strict=True)):
            if row.unspecified:
                assert (g.dtype, g.shape, g.stride()) == (e.dtype, e.shape, e.stride()), (
                    f"{row.op} [{sample.id}] output {i}: got {g.dtype}{list(g.shape)} strides "
                    f"{g.stride()}, eager {e.dtype}{list(e.shape)} strides {e.stride()}"
                )
                continue
            _assert_close(row, g, e, f"{row.op} [{sample.id}] output {i}")
    return dynamic


def _assert_close(row: Row, got: torch.Tensor, expected: torch.Tensor, where: str) -> None:
    """``got`` is ``expected`` within the row's tolerance for its dtype (NaNs where it has
    them, any strides)."""
    atol, rtol = tolerance(expected.dtype, row.tol)
    torch.testing.assert_close(
        got,
        expected,
        atol=atol,
        rtol=rtol,
        equal_nan=True,
        check_stride=False,
        msg=lambda m: f"{where}: {m}",
    )


def check(row: Row, sample: Sample) -> None:
    """Compiles the sample's graph, runs it on the sample's inputs and compares with eager. The
    graph compiles in strict mode: a lowering that stops compiling fails its row instead of
    running in eager PyTorch (and comparing eager with eager)."""
    expected = eager(row, sample)
    gm = build_graph(row, sample)
    with fxmlir.config.patch(fallback="error"):
        compiled = fxmlir.compile_graph(gm, sample.inputs)
    got = compiled(list(sample.inputs))
    assert len(got) == len(expected), f"{len(got)} outputs, eager has {len(expected)}"
    names = [f"output {i}" for i in range(len(expected))]
    if sample.parts:
        op = overload(row.op)
        origin = [p.id for p in sample.parts for _ in _call(op, p, p.inputs)]
        names = [f"{name} (part {part})" for name, part in zip(names, origin)]
    problems = []
    for name, g, e in zip(names, got, expected):
        if not isinstance(e, torch.Tensor):
            if g != e:
                problems.append(f"{name}: got {g!r}, eager {e!r}")
            continue
        if g.dtype != e.dtype or g.shape != e.shape:
            problems.append(f"{name}: got {g.dtype}{list(g.shape)}, eager {e.dtype}{list(e.shape)}")
            continue
        if row.unspecified:
            if g.stride() != e.stride():
                problems.append(f"{name}: got strides {g.stride()}, eager {e.stride()}")
            continue
        atol, rtol = tolerance(e.dtype, row.tol)
        try:
            torch.testing.assert_close(
                g, e, atol=atol, rtol=rtol, equal_nan=True, check_stride=False
            )
            if e.dtype.is_floating_point and row.zero_signs is None:
                zeros = (g == 0) & (e == 0)
                flipped = zeros & (torch.signbit(g) != torch.signbit(e))
                if flipped.any():
                    raise AssertionError(
                        f"the sign of zero differs at {flipped.nonzero().flatten()[:8].tolist()}"
                    )
        except AssertionError as err:
            detail = str(err).strip().replace("\n", "\n    ")
            problems.append(
                f"{name} ({e.dtype}, atol={atol}, rtol={rtol}):\n    {detail}\n"
                f"    got:   {g.flatten()[:24].tolist()}\n    eager: {e.flatten()[:24].tolist()}"
            )
    if problems:
        shown = [
            f"  input {i}: {x.dtype}{list(x.shape)} strides {x.stride()}"
            for i, x in enumerate(sample.inputs)
        ]
        raise AssertionError(
            f"{row.op} [{sample.id}] differs from eager\n"
            + "\n".join(shown)
            + "\n"
            + "\n".join(problems)
        )
