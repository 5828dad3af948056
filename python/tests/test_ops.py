"""Per-op numerics: every registered lowering against eager PyTorch, per dtype, with stated
tolerances and an expected-failure table that carries reasons.

One row per ATen overload (``ROWS``): the dtypes PyTorch defines it for, sample inputs per dtype
(broadcasting, Python scalars, non-contiguous views, 0-d and size-0 tensors, edge values, every
keyword variant), fixed-dtype "mixed" samples for type promotion, and its tolerances by output
dtype (``EXACT``, ``CLOSE``, ...). Each (op, dtype, sample) is one test; one sample may call the
op several times so that one compiled graph covers several cases. Expected failures (``XFAIL``)
are strict and say why; they are only for PyTorch behaviour the compiler cannot match.

Structure-only samples (non-contiguous, 0-d, size-0) run for float32 and int64 ("``PRIMARY``");
dtype-sensitive samples (random values, edge values, scalars) run for every dtype.

    .venv/bin/python -m pytest -q python/tests/test_ops.py
"""

from __future__ import annotations

import math
import zlib

import fxmlir
import pytest
import torch
from op_harness import (
    ALL,
    FLOATS,
    NAME,
    NO_BOOL,
    Row,
    Sample,
    b8,
    bf16,
    check,
    eager,
    expanded,
    f16,
    f32,
    f64,
    i8,
    i32,
    i64,
    merge,
    mk,
    reseed,
    sliced,
    specials,
    tensor,
    transposed,
    u8,
)

S = Sample
PRIMARY = (f32, i64)

#: Tolerances (atol, rtol) by output dtype, one per row. Integer and bool outputs are always
#: compared exactly. EXACT: bit-exact floats too (data movement, creation, comparisons,
#: conversions, and arithmetic that is one IEEE operation per element, halves included: both
#: sides compute in float32 and round once). CLOSE: a few ulps of float32/float64 (libm vs
#: SLEEF, reordered reductions, fused multiply-adds) and about one ulp of the half types.
EXACT: dict = {}
CLOSE = {f64: (1e-10, 1e-10), f32: (1e-5, 1e-5), f16: (1e-3, 2e-3), bf16: (1e-2, 1.6e-2)}
inf, nan = math.inf, math.nan
INT64_MAX = 2**63 - 1


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Overrides conftest's Dynamo reset: these tests call fxmlir directly, never Dynamo, and
    a reset per test would cost a third of the suite's time."""
    yield


def pairs(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (a[i], b[j]) pair, as two 1-D tensors."""
    return a.repeat_interleave(b.numel()), b.repeat(a.numel())


def cross(dt: torch.dtype, keep=None) -> list[torch.Tensor]:
    """The cross product of the dtype's edge values with themselves, optionally filtered."""
    a, b = pairs(specials(dt), specials(dt))
    if keep is not None:
        mask = keep(a, b)
        a, b = a[mask], b[mask]
    return [a, b]


def safe_int_division(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairs integer division is defined for: no zero divisor (eager raises) and no
    min / -1 (undefined in C++; SIGFPE on x86)."""
    keep = b != 0
    if not a.dtype.is_floating_point and a.dtype != b8:
        keep &= ~((a == torch.iinfo(a.dtype).min) & (b == -1))
    return keep


# ---- elementwise: unary -------------------------------------------------------------------


def unary(low=-3.0, high=3.0, variants=({},), plus_inf_apart=False):
    """Samples of a unary op; ``variants`` are keyword sets, each one more output.
    ``plus_inf_apart`` moves +inf out of the edge values into a sample of its own."""

    def call(op, x):
        return tuple(op(x, **kw) for kw in variants)

    def samples(dt):
        edge = specials(dt)
        out = [S("strided", [transposed([3, 4], dt, low, high)], call)]
        if plus_inf_apart and dt.is_floating_point:
            edge = edge[edge != inf]
            # 16 elements, so that eager's vectorised kernel handles every one of them.
            out.append(S("plus_inf", [tensor([inf] * 16, dt)], call))
        out.append(S("edge", [edge], call))
        if dt in PRIMARY:
            out += [S("0d", [mk([], dt, low, high)], call), S("empty", [mk([2, 0], dt)], call)]
        return out

    return samples


# ---- elementwise: binary ------------------------------------------------------------------


def binary(
    scalar_overload=False,
    variants=({},),
    int_low=-5,
    int_high=5,
    float_low=-3.0,
    float_high=3.0,
    divides_ints=False,
    scalars=(3, -2.5, True),
    edge_scalars=None,
):
    """Samples of a binary op. ``variants`` are keyword sets (alpha, rounding_mode), each one
    more output of the same graph. Tensor overloads also take Python scalars as ``other``.
    ``divides_ints`` keeps integer divisors nonzero."""

    def call(op, a, b):
        return tuple(op(a, b, **kw) for kw in variants)

    def with_scalars(values, every_variant=False):
        # Every scalar with the first keyword set; with the others, the first scalar (or every
        # scalar: edge values).
        def fn(op, a):
            first = tuple(op(a, s, **variants[0]) for s in values)
            rest = values if every_variant else values[:1]
            return first + tuple(op(a, s, **kw) for kw in variants[1:] for s in rest)

        return fn

    def domain(dt):
        if dt.is_floating_point:
            return float_low, float_high
        return int_low, int_high

    def samples(dt):
        lo, hi = domain(dt)
        nz = divides_ints and not dt.is_floating_point
        out = []
        scal = [s for s in scalars if not (nz and s == 0)]
        if scalar_overload:
            out.append(S("scalars", [mk([2, 3], dt, lo, hi)], with_scalars(scal)))
            edge = (
                edge_scalars(dt)
                if edge_scalars
                else ([nan, inf, -inf, -0.0, 0.5] if dt.is_floating_point else [0, 1, -1, 7])
            )
            edge = [s for s in edge if not (nz and s == 0)]
            x = specials(dt)
            if nz:
                x = x[x != torch.iinfo(dt).min] if dt != b8 else x
            out.append(S("edge", [x], with_scalars(edge, every_variant=True)))
            if dt in PRIMARY:
                out += [
                    S("strided", [transposed([3, 4], dt, lo, hi)], with_scalars(scal[:1])),
                    S("0d", [mk([], dt, lo, hi)], with_scalars(scal[:1])),
                    S("empty", [mk([0, 3], dt)], with_scalars(scal[:1])),
                ]
            return out
        out.append(
            S("broadcast", [mk([2, 3, 4], dt, lo, hi), mk([3, 1], dt, lo, hi, nonzero=nz)], call)
        )
        keep = safe_int_division if nz else None
        out.append(S("edge", cross(dt, keep), call))
        if scal:
            out.append(S("scalars", [mk([2, 3], dt, lo, hi)], with_scalars(scal)))
        if dt in PRIMARY:
            out += [
                S(
                    "strided",
                    [
                        transposed([3, 4], dt, lo, hi),
                        sliced([3, 4], dt, lo, hi, nonzero=nz),
                        expanded([3, 4], dt, lo, hi, nonzero=nz),
                    ],
                    lambda op, a, b, c: (*call(op, a, b), *call(op, c, a), *call(op, a, c)),
                ),
                S(
                    "0d",
                    [
                        mk([], dt, lo, hi),
                        mk([], dt, lo, hi, nonzero=nz),
                        mk([3], dt, lo, hi, nonzero=nz),
                    ],
                    lambda op, a, b, c: (*call(op, a, b), *call(op, c, b), *call(op, a, c)),
                ),
                S(
                    "empty",
                    [
                        mk([0, 3], dt),
                        mk([3], dt, nonzero=nz),
                        mk([2, 0], dt, nonzero=nz),
                        mk([1], dt, nonzero=nz),
                    ],
                    lambda op, a, b, c, d: (*call(op, a, b), *call(op, c, d)),
                ),
            ]
        return out

    return samples


def binary_mixed(variants=({},), skip=(), divides=False):
    """Type promotion across tensors: int widths, uint8/int8 (-> int16), bool, float widths,
    f16/bf16 (-> f32), and 0-d tensors (which do not raise a dimensioned operand's category)."""

    def samples():
        nz = divides
        ins = {
            "i32": mk([4], i32, -5, 5),
            "i64": mk([4], i64, -5, 5, nonzero=nz),
            "u8": mk([4], u8, 0, 9),
            "i8": mk([4], i8, -5, 5, nonzero=nz),
            "f16": mk([4], f16),
            "f32_0d": mk([], f32, 0.5, 2),
            "f64_0d": mk([], f64, 0.5, 2),
            "f32": mk([4], f32),
            "f64": mk([4], f64, 0.5, 2),
            "b": mk([4], b8),
            "bf16": mk([4], bf16, 0.5, 2),
            "i64_0d": mk([], i64, 1, 3),
        }
        combos = [
            ("i32", "i64"),
            ("u8", "i8"),
            ("f16", "f32_0d"),
            ("i32", "f64_0d"),
            ("f32", "f64"),
            ("b", "i64"),
            ("i64", "f16"),
            ("bf16", "f16"),
            ("f32", "i64_0d"),
            ("u8", "i64_0d"),
        ]
        combos = [c for c in combos if c not in skip]
        names = list(ins)

        def fn(op, *xs):
            env = dict(zip(names, xs))
            return tuple(op(env[a], env[b], **kw) for a, b in combos for kw in variants)

        return [S("promotion", list(ins.values()), fn)]

    return samples


def scalar_mixed(values, variants=({},), bool_ok=True):
    """Type promotion with Python scalars: int tensor with float scalar (-> default float),
    uint8/bool tensors with int scalars, f16 with a float scalar (stays f16)."""

    def samples():
        ins = [mk([4], i32, 1, 5), mk([4], u8, 1, 9), mk([4], f16, 0.5, 2), mk([4], bf16, 0.5, 2)]
        ins += [mk([4], b8)] if bool_ok else []

        def fn(op, *xs):
            return tuple(op(x, s, **kw) for x in xs for s in values for kw in variants)

        return [S("scalar_promotion", ins, fn)]

    return samples


def join(*makers):
    def samples():
        out = []
        for m in makers:
            out += m()
        return out

    return samples


# ---- elementwise: comparisons -------------------------------------------------------------


def compare(scalar_overload):
    def half_rounding(dt):
        # A half tensor holding round(0.1) compares equal to the Python scalar 0.1, which
        # PyTorch casts to the tensor's dtype before comparing.
        return tensor([0.1, 0.2, 1 / 3, 0.7, 100.1, -0.1], dt)

    def scalars(dt):
        values = [1, 1.5, True, -1, 0]
        return values + [0.1, 100.1] if dt.is_floating_point else values

    def edge_scalars(dt):
        return [nan, inf, -0.0, 1 / 3] if dt.is_floating_point else [0, -1, 7]

    def with_scalars(values):
        return lambda op, a: tuple(op(a, s) for s in values)

    def samples(dt):
        lo, hi = (-3, 3) if dt != u8 else (0, 6)
        out = []
        if scalar_overload:
            out.append(
                S("scalars", [mk([2, 3], dt, lo, hi, integral=True)], with_scalars(scalars(dt)))
            )
            out.append(S("edge", [specials(dt)], with_scalars(edge_scalars(dt))))
            if dt in (f16, bf16):
                out.append(
                    S("half_rounding", [half_rounding(dt)], with_scalars([0.1, 1 / 3, 100.1, -0.1]))
                )
            if dt in PRIMARY:
                out += [
                    S("strided", [transposed([3, 4], dt, integral=True)], with_scalars([1])),
                    S("0d", [mk([], dt, 0, 2, integral=True)], with_scalars([1])),
                    S("empty", [mk([0, 2], dt)], with_scalars([1])),
                ]
            return out
        call = lambda op, a, b: op(a, b)  # noqa: E731
        out.append(
            S(
                "broadcast",
                [mk([2, 3, 4], dt, lo, hi, integral=True), mk([3, 1], dt, lo, hi, integral=True)],
                call,
            )
        )
        out.append(S("edge", cross(dt), call))
        if dt in PRIMARY:
            out += [
                S(
                    "strided",
                    [
                        transposed([3, 4], dt, integral=True),
                        sliced([3, 4], dt, integral=True),
                        expanded([3, 4], dt, integral=True),
                    ],
                    lambda op, a, b, c: (op(a, b), op(c, a)),
                ),
                S(
                    "0d",
                    [
                        mk([], dt, 0, 2, integral=True),
                        mk([], dt, 0, 2, integral=True),
                        mk([3], dt, 0, 2, integral=True),
                    ],
                    lambda op, a, b, c: (op(a, b), op(c, b), op(a, c)),
                ),
                S("empty", [mk([0, 3], dt), mk([3], dt)], call),
            ]
        return out

    return samples


def compare_mixed(scalar_overload):
    def samples():
        if scalar_overload:
            # uint8 against -1: the scalar wraps to 255 in the tensor's dtype; int against a
            # float scalar compares in the default float type.
            ins = [
                tensor([0, 1, 200, 255], u8),
                tensor([-3, 2, 16777217, 3], i64),
                tensor([True, False, True, False], b8),
                tensor([-1, 0, 56, 2], i8),
            ]
            return [
                S(
                    "scalar_promotion",
                    ins,
                    lambda op, u, i, b, s: (
                        op(u, -1),
                        op(u, 255),
                        op(i, 2.5),
                        op(i, 16777217.0),
                        op(b, 1),
                        op(b, 0.5),
                        op(s, 255),
                        op(u, 1.5),
                        op(u, 456),
                        op(s, -200),
                    ),
                )
            ]
        ins = [
            mk([4], i32, -2, 2),
            mk([4], i64, -2, 2),
            tensor([0, 1, 200, 255], u8),
            tensor([0, 1, -56, -1], i8),
            tensor([0.1, 0.2, 1.0, 2.0], f16),
            tensor(0.1, f32),
            mk([4], f32, integral=True),
            mk([4], b8),
            tensor(0.1, f64),
            tensor([0.1, 1.0, 0.2, 0.3], f32),
        ]
        return [
            S(
                "promotion",
                ins,
                lambda op, a, b, u, s, h, z, f, bo, z64, f2: (
                    op(a, b),
                    op(u, s),
                    op(h, z),
                    op(a, f),
                    op(bo, b),
                    op(f2, z64),
                    op(b, z),
                ),
            )
        ]

    return samples


# ---- elementwise: where, conversion -------------------------------------------------------


def where_samples(dt):
    call = lambda op, c, a, b: op(c, a, b)  # noqa: E731
    s = specials(dt)
    out = [
        S("broadcast", [mk([3, 1], b8), mk([2, 3, 4], dt), mk([4], dt)], call),
        S("edge", [tensor([i % 2 for i in range(s.numel())], b8), s, s.flip(0)], call),
    ]
    if dt in PRIMARY:
        out += [
            S("strided", [transposed([3, 4], b8), sliced([3, 4], dt), expanded([3, 4], dt)], call),
            S(
                "0d",
                [mk([], b8), mk([], dt), mk([], dt), mk([3], dt)],
                lambda op, c, a, b, v: (op(c, a, b), op(c, v, b), op(c, a, v)),
            ),
            S("empty", [mk([0, 3], b8), mk([3], dt), mk([0, 1], dt)], call),
        ]
    return out


def where_mixed():
    ins = [
        mk([4], b8),
        mk([4], f32),
        mk([4], f64),
        mk([4], i32),
        mk([4], f16),
        mk([4], i64),
        mk([], f64),
        mk([], i64),
        mk([4], u8, 0, 9),
        mk([4], i8),
    ]

    def fn(op, c, a32, a64, ai32, ah, ai64, z64, zi64, au8, ai8):
        return (
            op(c, a32, a64),
            op(c, ai32, ah),
            op(c, c, ai64),
            op(c, a32, z64),
            op(c, ai32, z64),
            op(c, zi64, ai32),
            op(c, au8, ai8),
        )

    return [S("promotion", ins, fn)]


def convert(call):
    """``call(op, x, dtype)``: one graph converts the input to every dtype at once."""

    def to_all(targets):
        return lambda op, x: tuple(call(op, x, t) for t in targets)

    def samples(dt):
        if dt.is_floating_point:
            # In range for every target; float -> int truncates toward zero.
            values = mk([3, 5], dt, -100, 100)
            values[0, :5] = tensor([-0.0, 0.5, -0.5, 99.99, -99.99], dt)
        else:
            values = specials(dt).reshape(-1, 2) if dt != b8 else tensor([[True, False]], b8)
        out = [S("to_all", [values], to_all(ALL))]
        if dt in (f64, i64, i32):
            # PyTorch builds halves from a float32, so these round twice (to 1.0, 1.0 and
            # 2**24); a direct conversion would round once, the other way.
            twice = [1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40] if dt == f64 else [16842753]
            out.append(S("double_rounding", [tensor(twice, dt)], to_all((f16, bf16))))
        if dt.is_floating_point:
            out.append(S("edge", [specials(dt)], to_all(FLOATS + (b8,))))
            # PyTorch defines float -> uint8 through int64, so negatives wrap.
            out.append(
                S("to_uint8_wraps", [tensor([-1.0, -3.7, -200.5, 255.9, -0.9], dt)], to_all((u8,)))
            )
        if dt in PRIMARY:
            out.append(S("strided", [transposed([3, 4], dt)], to_all((f64, i32, b8))))
            out.append(S("0d", [mk([], dt)], to_all((f16, i8))))
            out.append(S("empty", [mk([0, 2], dt)], to_all((f64,))))
        return out

    return samples


# ---- creation -----------------------------------------------------------------------------


def fill_values(dt):
    if dt == b8:
        return [True, False, 1, 0.0]
    if dt.is_floating_point:
        return [2.5, -3, True, -0.0, nan, inf, -inf, 1e-3]
    return [7, -2 if dt != u8 else 2, True, 2.9, -2.9 if dt != u8 else 200]


def full_samples(dt):
    vals = fill_values(dt)
    return [
        S("values", [], lambda op: tuple(op([2, 3], v, dtype=dt) for v in vals)),
        S(
            "shapes",
            [],
            lambda op: (
                op([], vals[0], dtype=dt),
                op([0, 3], vals[0], dtype=dt),
                op([4], vals[0], dtype=dt),
            ),
        ),
    ]


def full_mixed():
    # No dtype: a float fill gives the default float, an int gives int64, a bool gives bool.
    return [S("inferred_dtype", [], lambda op: (op([2], 2.5), op([2], 3), op([2], True)))]


def full_like_samples(dt):
    vals = fill_values(dt)
    out = [S("values", [mk([2, 3], dt)], lambda op, x: tuple(op(x, v) for v in vals))]
    if dt in PRIMARY:
        # preserve_format keeps a permuted input's strides; dtype= overrides the dtype.
        out += [
            S(
                "strided",
                [
                    transposed([3, 4], dt),
                    mk([2, 3, 4, 5], dt).to(memory_format=torch.channels_last),
                ],
                lambda op, x, y: (
                    op(x, vals[0]),
                    op(y, vals[0]),
                    op(x, vals[0], dtype=f64),
                    op(x, 1, dtype=b8),
                    op(x, vals[0], memory_format=torch.contiguous_format),
                ),
            ),
            S(
                "0d_empty",
                [mk([], dt), mk([0, 2], dt)],
                lambda op, x, y: (op(x, vals[0]), op(y, vals[0])),
            ),
        ]
    return out


def scalar_tensor_samples(dt):
    vals = fill_values(dt)
    return [S("values", [], lambda op: tuple(op(v, dtype=dt) for v in vals))]


def scalar_tensor_mixed():
    return [S("default_dtype", [], lambda op: (op(2.5), op(3), op(True)))]


def const_samples(dt):
    return [
        S("shapes", [], lambda op: (op([2, 3], dtype=dt), op([], dtype=dt), op([0, 4], dtype=dt)))
    ]


def const_mixed():
    return [S("default_dtype", [], lambda op: (op([2]),))]


def const_like_samples(dt):
    out = [S("basic", [mk([2, 3], dt)], lambda op, x: op(x))]
    if dt in PRIMARY:
        out += [
            S(
                "strided",
                [transposed([3, 4], dt), mk([], dt), mk([0, 3], dt)],
                lambda op, x, z, e: (
                    op(x),
                    op(z),
                    op(e),
                    op(x, dtype=f16),
                    op(x, memory_format=torch.contiguous_format),
                ),
            )
        ]
    return out


# ---- reductions ---------------------------------------------------------------------------


def reduce_samples(kind, none_ok=True):
    """``kind``: "all" (no dim argument), "list" (int[]? dim + keepdim; ``none_ok=False`` for
    int[] dims, where ``[]`` is the only "all"), "one" (int dim + keepdim)."""

    def variants():
        if kind == "all":
            return [{}]
        if kind == "list":
            vs = [
                dict(dim=[1]),
                dict(dim=[0, 2], keepdim=True),
                dict(dim=[-1]),
                dict(dim=[]),
                dict(dim=[], keepdim=True),
            ]
            return vs + [dict(dim=None), dict(dim=None, keepdim=True)] if none_ok else vs
        return [dict(dim=1), dict(dim=-1, keepdim=True), dict(dim=0)]

    def call(vs):
        def fn(op, x):
            out = []
            for kw in vs:
                args = [x] + ([kw["dim"]] if "dim" in kw else [])
                extra = {k: v for k, v in kw.items() if k != "dim"}
                out.append(op(*args, **extra))
            return tuple(out)

        return fn

    def zero_d(vs):
        # On a 0-d tensor, dim 0 / -1 name the tensor itself.
        if kind == "all":
            return vs
        if kind == "one":
            return [dict(dim=0), dict(dim=-1, keepdim=True)]
        return [dict(dim=[0]), dict(dim=[-1], keepdim=True), dict(dim=[])] + (
            [dict(dim=None)] if none_ok else []
        )

    def samples(dt):
        vs = variants()
        edge = specials(dt).reshape(1, -1, 1) if dt != b8 else tensor([[[1], [0], [0], [1]]], b8)
        edge_vs = [{}] if kind == "all" else ([dict(dim=1)] if kind == "one" else [dict(dim=[1])])
        out = [
            S("random", [mk([2, 3, 4], dt)], call(vs)),
            S("edge", [edge], call(edge_vs)),
        ]
        if dt in PRIMARY:
            out += [
                S("strided", [transposed([3, 4], dt).unsqueeze(0)], call(vs)),
                S("0d", [mk([], dt)], call(zero_d(vs))),
            ]
        return out

    return samples


def empty_reduce(vs):
    """Reductions with an identity element over size-0 dimensions."""

    def samples():
        return [
            S(
                "size0",
                [mk([0, 3], f32), mk([2, 0], i64)],
                lambda op, a, b: tuple(op(x, *v) for x in (a, b) for v in vs),
            )
        ]

    return samples


def sum_mixed():
    ins = [
        mk([2, 3], i32),
        mk([2, 3], f16),
        mk([2, 3], b8),
        mk([2, 3], u8, 0, 255),
        mk([0, 3], f32),
        mk([2, 0], i64),
    ]
    return [
        S(
            "dtype_and_size0",
            ins,
            lambda op, a, h, b, u, e, ei: (
                op(a, dtype=f64),
                op(h, dtype=f32),
                op(b),
                op(u),
                op(a, dtype=i8),
                op(e),
                op(ei),
            ),
        )
    ]


def sum_dim_mixed():
    ins = [mk([2, 3], i32), mk([2, 3], f16), mk([2, 3], b8), mk([0, 3], f32), mk([2, 0], i64)]
    return [
        S(
            "dtype_and_size0",
            ins,
            lambda op, a, h, b, e, ei: (
                op(a, [0], dtype=f64),
                op(h, [1], True, dtype=f32),
                op(b, [1]),
                op(e, [0]),
                op(e, [1]),
                op(ei, [1], True),
            ),
        )
    ]


def mean_mixed(dim):
    ins = [mk([2, 3], i64), mk([2, 3], f16), mk([0, 3], f32)]
    if dim:
        return [
            S(
                "dtype_and_size0",
                ins,
                lambda op, a, h, e: (
                    op(a, [1], dtype=f32),
                    op(h, [0], dtype=f64),
                    op(e, [0]),
                    op(e, [1]),
                ),
            )
        ]
    return [
        S("dtype_and_size0", ins, lambda op, a, h, e: (op(a, dtype=f64), op(h, dtype=f32), op(e)))
    ]


def var_samples(with_mean):
    def call(x, op, corrections, dims):
        return tuple(op(x, d, correction=c, keepdim=k) for d, k in dims for c in corrections)

    def samples(dt):
        dims = [([0, 2], True), (None, False), ([-1], True)]
        out = [
            S(
                "corrections",
                [mk([2, 3, 4], dt)],
                lambda op, x: (
                    call(x, op, [None, 0, 1, 2, 0.5], [([1], False)]) + call(x, op, [1], dims)
                ),
            ),
            S(
                "edge",
                [specials(dt).reshape(1, -1)],
                lambda op, x: call(x, op, [1], [([1], False)]),
            ),
            # A single element: correction 1 divides 0 by 0, correction 2 by max(1 - 2, 0).
            S("single", [mk([3, 1], dt)], lambda op, x: call(x, op, [0, 1, 2], [([1], False)])),
        ]
        if dt == f32:
            out += [
                S(
                    "strided",
                    [transposed([3, 4], dt).unsqueeze(0)],
                    lambda op, x: call(x, op, [1], [([1], False), (None, True)]),
                ),
                S(
                    "0d",
                    [mk([], dt)],
                    lambda op, x: call(x, op, [0, 1], [(None, False), ([0], True)]),
                ),
                S(
                    "empty",
                    [mk([0, 3], dt)],
                    lambda op, x: call(x, op, [1], [([0], False), ([1], True)]),
                ),
            ]
        return out

    return samples


def arg_samples(dt):
    vs = [
        dict(dim=1),
        dict(dim=-1, keepdim=True),
        dict(dim=None),
        dict(dim=None, keepdim=True),
        dict(dim=0),
    ]
    call = lambda op, x: tuple(op(x, **kw) for kw in vs)  # noqa: E731
    # Ties everywhere: integral values from a small range; the first extreme must win.
    lo, hi = (-2, 2) if dt != u8 else (0, 4)
    s = specials(dt)
    out = [
        S("ties", [mk([3, 4, 5], dt, lo, hi, integral=True)], call),
        S("edge", [torch.stack([s, s.flip(0)])], lambda op, x: (op(x, 1), op(x, 0), op(x))),
    ]
    if dt.is_floating_point:
        # NaN counts as the extreme for both argmax and argmin; -inf / inf / -0.0 ties.
        out.append(
            S(
                "nan_inf",
                [
                    tensor(
                        [
                            [1.0, nan, 3.0, nan],
                            [-inf, -inf, inf, inf],
                            [-0.0, 0.0, 0.0, -0.0],
                            [inf, 2.0, nan, -inf],
                        ],
                        dt,
                    )
                ],
                lambda op, x: (op(x, 1), op(x, 0), op(x)),
            )
        )
    if dt in PRIMARY:
        out += [
            S("strided", [transposed([3, 4], dt, integral=True)], call),
            S(
                "0d",
                [mk([], dt)],
                lambda op, x: (op(x), op(x, 0), op(x, -1, True), op(x, None, True)),
            ),
        ]
    return out


# ---- linear -------------------------------------------------------------------------------


def int_range(dt):
    return (0, 6) if dt == u8 else (-4, 4)


def mm_samples(dt):
    lo, hi = int_range(dt) if not dt.is_floating_point else (-2.0, 2.0)
    call = lambda op, a, b: op(a, b)  # noqa: E731
    out = [S("basic", [mk([3, 4], dt, lo, hi), mk([4, 5], dt, lo, hi)], call)]
    if dt.is_floating_point:
        s = specials(dt)[:16].reshape(4, 4)
        out.append(S("edge", [s, s.t().contiguous()], call))
    if dt in PRIMARY:
        out += [
            S(
                "strided",
                [
                    transposed([3, 4], dt, lo, hi),
                    sliced([4, 5], dt, lo, hi),
                    expanded([5, 4], dt, lo, hi),
                    transposed([4, 3], dt, lo, hi),
                ],
                lambda op, a, b, c, d: (op(a, b), op(c, d)),
            ),
            S(
                "size0",
                [mk([3, 0], dt), mk([0, 5], dt), mk([0, 4], dt), mk([4, 2], dt)],
                lambda op, a, b, c, d: (op(a, b), op(c, d)),
            ),
            S(
                "vector_shapes",
                [mk([1, 7], dt, lo, hi), mk([7, 1], dt, lo, hi)],
                lambda op, a, b: (op(a, b), op(b, a)),
            ),
        ]
    return out


def bmm_samples(dt):
    lo, hi = int_range(dt) if not dt.is_floating_point else (-2.0, 2.0)
    out = [
        S(
            "basic",
            [mk([2, 3, 4], dt, lo, hi), mk([2, 4, 5], dt, lo, hi)],
            lambda op, a, b: op(a, b),
        )
    ]
    if dt in PRIMARY:
        out += [
            S(
                "strided",
                [mk([3, 2, 4], dt, lo, hi).transpose(0, 1), mk([2, 5, 4], dt, lo, hi).mT],
                lambda op, a, b: op(a, b),
            ),
            S(
                "size0",
                [mk([0, 3, 4], dt), mk([0, 4, 5], dt), mk([2, 3, 0], dt), mk([2, 0, 5], dt)],
                lambda op, a, b, c, d: (op(a, b), op(c, d)),
            ),
        ]
    return out


def addmm_samples(dt):
    lo, hi = int_range(dt) if not dt.is_floating_point else (-2.0, 2.0)
    scal = (
        [(1, 1), (2, 3), (0, 2), (1, 0)]
        if not dt.is_floating_point
        else [(1, 1), (0.5, -1.5), (0, 1), (1, 0), (2, 0.25)]
    )
    m1, m2 = mk([3, 4], dt, lo, hi), mk([4, 5], dt, lo, hi)
    out = [
        S(
            "bias_shapes",
            [
                mk([5], dt, lo, hi),
                mk([3, 1], dt, lo, hi),
                mk([3, 5], dt, lo, hi),
                mk([], dt, lo, hi),
                m1,
                m2,
            ],
            lambda op, b1, b2, b3, b0, a, b: (
                op(b1, a, b),
                op(b2, a, b),
                op(b3, a, b),
                op(b0, a, b),
            ),
        ),
        S(
            "beta_alpha",
            [mk([5], dt, lo, hi), m1, m2],
            lambda op, c, a, b: tuple(op(c, a, b, beta=be, alpha=al) for be, al in scal),
        ),
    ]
    if dt.is_floating_point:
        # beta = 0 ignores the bias, NaN and inf included.
        out.append(
            S(
                "beta0_nan_bias",
                [tensor([nan, inf, 1.0, -inf, 2.0], dt), m1, m2],
                lambda op, c, a, b: (
                    op(c, a, b, beta=0),
                    op(c, a, b),
                    op(c, a, b, beta=0.0, alpha=2),
                ),
            )
        )
    if dt in PRIMARY:
        out += [
            S(
                "strided",
                [
                    expanded([3, 5], dt, lo, hi),
                    transposed([3, 4], dt, lo, hi),
                    sliced([4, 5], dt, lo, hi),
                ],
                lambda op, c, a, b: op(c, a, b),
            ),
            S(
                "size0",
                [mk([5], dt, lo, hi), mk([3, 0], dt), mk([0, 5], dt)],
                lambda op, c, a, b: (op(c, a, b), op(c, a, b, beta=2)),
            ),
        ]
    return out


# ---- normalization ------------------------------------------------------------------------


def softmax_samples(dt):
    call = lambda op, x: (op(x, -1, False), op(x, 0, False), op(x, 1, False))  # noqa: E731
    rows = tensor(
        [
            [-inf, -inf, -inf, -inf],
            [1.0, -inf, 2.0, -inf],
            [inf, 1.0, 2.0, 3.0],
            [nan, 1.0, 2.0, 3.0],
            [1e4, -1e4, 0.0, 1e4],
            [0.0, 0.0, 0.0, 0.0],
        ],
        dt,
    )
    out = [
        S("random", [mk([2, 3, 4], dt, -5, 5)], call),
        S("edge", [rows], lambda op, x: (op(x, 1, False), op(x, 0, False))),
    ]
    if dt == f32:
        out += [
            S(
                "strided",
                [transposed([3, 4], dt)],
                lambda op, x: (op(x, 1, False), op(x, 0, False)),
            ),
            S(
                "0d_empty",
                [mk([], dt), mk([0, 3], dt)],
                lambda op, z, e: (
                    op(z, 0, False),
                    op(z, -1, False),
                    op(e, 1, False),
                    op(e, 0, False),
                ),
            ),
        ]
    return out


def layer_norm_samples(dt):
    x = mk([2, 3, 4], dt)
    w, bias = mk([4], dt), mk([4], dt)
    w2, b2 = mk([3, 4], dt), mk([3, 4], dt)

    def call(op, x, w, b, w2, b2):
        return (
            *op(x, [4], w, b, 1e-5),
            *op(x, [3, 4], w2, b2, 1e-3),
            *op(x, [4], None, None, 1e-5),
            *op(x, [4], w, None, 1e-5),
            *op(x, [4], None, b, 1e-5),
            *op(x, [2, 3, 4], None, None, 1e-5),
        )

    out = [
        S("weights", [x, w, bias, w2, b2], call),
        # Constant rows (variance 0: rstd = 1/sqrt(eps)), large offsets, NaN.
        S(
            "edge",
            [
                tensor(
                    [[5.0, 5.0, 5.0, 5.0], [1e3, 1e3 + 1, 1e3 + 2, 1e3 + 3], [nan, 0.0, 1.0, 2.0]],
                    dt,
                )
            ],
            lambda op, x: op(x, [4], None, None, 1e-5),
        ),
        S(
            "inf_row",
            [tensor([[inf, 1.0, 2.0, 3.0], [-inf, 0.0, 1.0, 2.0]], dt)],
            lambda op, x: op(x, [4], None, None, 1e-5),
        ),
    ]
    if dt == f32:
        out += [
            S(
                "strided",
                [transposed([3, 4], dt), expanded([4], dt), sliced([4], dt)],
                lambda op, x, w, b: op(x, [4], w, b, 1e-5),
            ),
            S("size0", [mk([0, 4], dt)], lambda op, x: op(x, [4], None, None, 1e-5)),
        ]
    return out


def layer_norm_mixed():
    # bfloat16 input with float32 weight and bias (PyTorch's mixed-dtype layer norm on CPU):
    # the normalised output, and the statistics on their own.
    ins = [mk([2, 4], bf16), mk([4], f32), mk([4], f32)]
    return [
        S("half_input_float_weight", ins, lambda op, x, w, b: op(x, [4], w, b, 1e-5)[0]),
        S("half_input_float_weight_stats", ins, lambda op, x, w, b: op(x, [4], w, b, 1e-5)[1:]),
    ]


# ---- data movement ------------------------------------------------------------------------


def movement(basic, primary=()):
    """``basic(dt)`` -> (inputs, fn) run for every dtype; ``primary`` extra samples (id,
    inputs(dt), fn) run for float32 and int64."""

    def samples(dt):
        ins, fn = basic(dt)
        out = [S("basic", ins, fn)]
        if dt in PRIMARY:
            out += [S(sid, make(dt), fn) for sid, make, fn in primary]
        return out

    return samples


def X(*shape):
    return lambda dt: [mk(shape, dt)]


def TX(*shape):
    return lambda dt: [transposed(shape, dt)]


VIEW_PRIMARY = [
    (
        "0d_size0",
        lambda dt: [mk([], dt), mk([0, 3], dt), mk([1], dt)],
        lambda op, z, e, o: (op(z, [1]), op(z, [1, 1]), op(e, [3, 0]), op(e, [-1]), op(o, [])),
    ),
    ("sliced_rows", lambda dt: [mk([4, 3], dt)[1:3]], lambda op, x: (op(x, [6]), op(x, [3, 2]))),
]


ROWS: list[Row] = [
    # ---- elementwise: unary ----
    Row("aten.neg.default", NO_BOOL, unary(), tol=EXACT),
    Row("aten.abs.default", NO_BOOL, unary(), tol=EXACT),
    Row("aten.exp.default", ALL, unary(), tol=CLOSE),
    Row("aten.log.default", ALL, unary(0.05, 5), tol=CLOSE),
    Row("aten.sqrt.default", ALL, unary(0.0, 5), tol=CLOSE),
    Row("aten.rsqrt.default", ALL, unary(0.05, 5), tol=CLOSE),
    Row("aten.sin.default", ALL, unary(-7, 7), tol=CLOSE),
    Row("aten.cos.default", ALL, unary(-7, 7), tol=CLOSE),
    Row("aten.tanh.default", ALL, unary(), tol=CLOSE),
    Row("aten.erf.default", ALL, unary(), tol=CLOSE),
    Row("aten.reciprocal.default", ALL, unary(), tol=CLOSE),
    Row("aten.sigmoid.default", ALL, unary(-8, 8), tol=CLOSE),
    Row("aten.relu.default", NO_BOOL, unary(), tol=EXACT),
    Row(
        "aten.gelu.default",
        FLOATS,
        unary(-4, 4, variants=({}, {"approximate": "tanh"}), plus_inf_apart=True),
        tol=CLOSE,
    ),
    # ---- elementwise: binary ----
    Row(
        "aten.add.Tensor",
        ALL,
        binary(variants=({}, {"alpha": 2})),
        tol=EXACT,
        mixed=join(binary_mixed(), scalar_mixed([2, -1.5, True], ({}, {"alpha": 2}))),
    ),
    Row(
        "aten.add.Scalar",
        ALL,
        binary(True, variants=({}, {"alpha": 2})),
        tol=EXACT,
        mixed=scalar_mixed([2, -1.5, True]),
    ),
    # Subtraction involving a bool tensor is an error in PyTorch.
    Row(
        "aten.sub.Tensor",
        NO_BOOL,
        binary(variants=({}, {"alpha": 2}), scalars=(3, -2.5)),
        tol=EXACT,
        mixed=join(binary_mixed(skip=[("b", "i64")]), scalar_mixed([2, -1.5], bool_ok=False)),
    ),
    Row(
        "aten.sub.Scalar",
        NO_BOOL,
        binary(True, variants=({}, {"alpha": 2}), scalars=(3, -2.5)),
        tol=EXACT,
        mixed=scalar_mixed([2, -1.5], bool_ok=False),
    ),
    Row(
        "aten.rsub.Tensor",
        NO_BOOL,
        binary(variants=({}, {"alpha": 2}), scalars=()),
        tol=EXACT,
        mixed=binary_mixed(skip=[("b", "i64")]),
    ),
    Row(
        "aten.rsub.Scalar",
        NO_BOOL,
        binary(True, variants=({}, {"alpha": 2}), scalars=(3, -2.5)),
        tol=EXACT,
        mixed=scalar_mixed([2, -1.5], bool_ok=False),
    ),
    Row(
        "aten.mul.Tensor",
        ALL,
        binary(),
        tol=EXACT,
        mixed=join(binary_mixed(), scalar_mixed([2, -1.5, True])),
    ),
    Row("aten.mul.Scalar", ALL, binary(True), tol=EXACT, mixed=scalar_mixed([2, -1.5, True])),
    Row(
        "aten.div.Tensor",
        ALL,
        binary(),
        tol=EXACT,
        mixed=join(binary_mixed(), scalar_mixed([2, -1.5, True])),
    ),
    Row(
        "aten.div.Scalar",
        ALL,
        binary(True, scalars=(3, -2.5, True, 0)),
        tol=EXACT,
        mixed=scalar_mixed([2, -1.5, True]),
    ),
    # CLOSE, not EXACT: PyTorch's float16 floor division is off by one ulp from the rounded
    # float32 quotient in rare cases.
    Row(
        "aten.div.Tensor_mode",
        NO_BOOL,
        binary(
            variants=(
                {"rounding_mode": "trunc"},
                {"rounding_mode": "floor"},
                {"rounding_mode": None},
            ),
            int_low=-20,
            int_high=20,
            float_low=-20,
            float_high=20,
            divides_ints=True,
            scalars=(3, -2.5, -4),
        ),
        tol=CLOSE,
        mixed=join(
            binary_mixed(({"rounding_mode": "trunc"}, {"rounding_mode": "floor"}), divides=True),
            scalar_mixed([2, -1.5], ({"rounding_mode": "trunc"}, {"rounding_mode": "floor"})),
        ),
    ),
    Row(
        "aten.div.Scalar_mode",
        ALL,
        binary(
            True,
            variants=({"rounding_mode": "trunc"}, {"rounding_mode": "floor"}),
            int_low=-20,
            int_high=20,
            float_low=-20,
            float_high=20,
            divides_ints=True,
            scalars=(3, -2.5, -4),
            edge_scalars=lambda dt: (
                [nan, inf, -inf, -0.0, 0.0, 0.3, -3.0] if dt.is_floating_point else [1, -1, 7, -3]
            ),
        ),
        tol=CLOSE,
        mixed=scalar_mixed([2, -1.5], ({"rounding_mode": "trunc"}, {"rounding_mode": "floor"})),
    ),
    Row(
        "aten.pow.Tensor_Tensor",
        NO_BOOL,
        binary(int_low=0, int_high=4, float_low=0.1, float_high=3, scalars=()),
        tol=CLOSE,
        mixed=binary_mixed(),
    ),
    Row(
        "aten.pow.Tensor_Scalar",
        ALL,
        binary(
            True,
            int_low=-3,
            int_high=3,
            scalars=(2, 3, 0, 1, 5, 0.5, 1.5),
            edge_scalars=lambda dt: (
                [0.5, -0.5, 2, 3, -1, -2, 0, 1, 1.7, -2.5, nan, inf, -inf]
                if dt.is_floating_point
                else [0, 1, 2, 3, 0.5]
            ),
        ),
        tol=CLOSE,
    ),
    Row("aten.pow.Scalar", ALL, lambda dt: pow_scalar_samples(dt), tol=CLOSE),
    Row("aten.maximum.default", ALL, binary(scalars=()), tol=EXACT, mixed=binary_mixed()),
    Row("aten.minimum.default", ALL, binary(scalars=()), tol=EXACT, mixed=binary_mixed()),
    # ---- elementwise: comparisons ----
    *[
        Row(f"aten.{name}.Tensor", ALL, compare(False), mixed=compare_mixed(False), tol=EXACT)
        for name in ("eq", "ne", "lt", "le", "gt", "ge")
    ],
    *[
        Row(f"aten.{name}.Scalar", ALL, compare(True), mixed=compare_mixed(True), tol=EXACT)
        for name in ("eq", "ne", "lt", "le", "gt", "ge")
    ],
    Row("aten.where.self", ALL, where_samples, mixed=where_mixed, tol=EXACT),
    Row("aten._to_copy.default", ALL, convert(lambda op, x, t: op(x, dtype=t)), tol=EXACT),
    Row("prims.convert_element_type.default", ALL, convert(lambda op, x, t: op(x, t)), tol=EXACT),
    # ---- creation ----
    Row("aten.full.default", ALL, full_samples, mixed=full_mixed, tol=EXACT),
    Row("aten.full_like.default", ALL, full_like_samples, tol=EXACT),
    Row(
        "aten.scalar_tensor.default",
        ALL,
        scalar_tensor_samples,
        mixed=scalar_tensor_mixed,
        tol=EXACT,
    ),
    Row("aten.zeros.default", ALL, const_samples, mixed=const_mixed, tol=EXACT),
    Row("aten.ones.default", ALL, const_samples, mixed=const_mixed, tol=EXACT),
    Row("aten.zeros_like.default", ALL, const_like_samples, tol=EXACT),
    Row("aten.ones_like.default", ALL, const_like_samples, tol=EXACT),
    # ---- linear ----
    Row("aten.mm.default", NO_BOOL, mm_samples, tol=CLOSE),
    Row("aten.bmm.default", NO_BOOL, bmm_samples, tol=CLOSE),
    Row("aten.addmm.default", NO_BOOL, addmm_samples, tol=CLOSE),
    # ---- reductions ----
    Row("aten.sum.default", ALL, reduce_samples("all"), tol=CLOSE, mixed=sum_mixed),
    Row("aten.sum.dim_IntList", ALL, reduce_samples("list"), tol=CLOSE, mixed=sum_dim_mixed),
    Row(
        "aten.mean.default",
        FLOATS,
        reduce_samples("all"),
        tol=CLOSE,
        mixed=lambda: mean_mixed(False),
    ),
    Row("aten.mean.dim", FLOATS, reduce_samples("list"), tol=CLOSE, mixed=lambda: mean_mixed(True)),
    Row("aten.amax.default", ALL, reduce_samples("list", none_ok=False), tol=EXACT),
    Row("aten.amin.default", ALL, reduce_samples("list", none_ok=False), tol=EXACT),
    Row("aten.max.default", ALL, reduce_samples("all"), tol=EXACT),
    Row("aten.min.default", ALL, reduce_samples("all"), tol=EXACT),
    Row("aten.any.default", ALL, reduce_samples("all"), mixed=empty_reduce([()]), tol=EXACT),
    Row(
        "aten.any.dim", ALL, reduce_samples("one"), mixed=empty_reduce([(0,), (1, True)]), tol=EXACT
    ),
    Row(
        "aten.any.dims",
        ALL,
        reduce_samples("list"),
        mixed=empty_reduce([([0],), ([1], True), (None,)]),
        tol=EXACT,
    ),
    Row("aten.var.correction", FLOATS, var_samples(False), tol=CLOSE),
    Row("aten.var_mean.correction", FLOATS, var_samples(True), tol=CLOSE),
    Row("aten.argmax.default", NO_BOOL, arg_samples, tol=EXACT),
    Row("aten.argmin.default", NO_BOOL, arg_samples, tol=EXACT),
    # ---- normalization ----
    Row("aten._softmax.default", FLOATS, softmax_samples, tol=CLOSE),
    Row("aten._log_softmax.default", FLOATS, softmax_samples, tol=CLOSE),
    Row(
        "aten.native_layer_norm.default",
        FLOATS,
        layer_norm_samples,
        mixed=layer_norm_mixed,
        tol=CLOSE,
    ),
    # ---- data movement ----
    Row(
        "aten.view.default",
        ALL,
        movement(
            lambda dt: (
                [mk([2, 3, 4], dt)],
                lambda op, x: (op(x, [6, 4]), op(x, [-1]), op(x, [4, 3, 2])),
            ),
            VIEW_PRIMARY,
        ),
        tol=EXACT,
    ),
    Row(
        "aten._unsafe_view.default",
        ALL,
        movement(
            lambda dt: (
                [mk([2, 3, 4], dt)],
                lambda op, x: (op(x, [6, 4]), op(x, [24]), op(x, [4, 1, 3, 2])),
            ),
            VIEW_PRIMARY,
        ),
        tol=EXACT,
    ),
    Row(
        "aten.reshape.default",
        ALL,
        movement(
            lambda dt: (
                [mk([2, 3, 4], dt)],
                lambda op, x: (op(x, [6, 4]), op(x, [-1]), op(x, [4, 3, 2])),
            ),
            VIEW_PRIMARY + [("strided", TX(3, 4), lambda op, x: (op(x, [12]), op(x, [2, 6])))],
        ),
        tol=EXACT,
        direct="CompositeImplicitAutograd: make_fx decomposes it into view/_unsafe_view",
    ),
    Row(
        "aten.flatten.using_ints",
        ALL,
        movement(
            lambda dt: (
                [mk([2, 3, 4], dt)],
                lambda op, x: (op(x, 0, -1), op(x, 1, 2), op(x, 0, 1), op(x, 1, 1)),
            ),
            [
                (
                    "strided_0d",
                    lambda dt: [transposed([3, 4], dt), mk([], dt)],
                    lambda op, x, z: (op(x, 0, 1), op(z, 0, -1)),
                )
            ],
        ),
        tol=EXACT,
        direct="CompositeImplicitAutograd: make_fx decomposes it into view",
    ),
    Row(
        "aten.unsqueeze.default",
        ALL,
        movement(
            lambda dt: ([mk([2, 3], dt)], lambda op, x: (op(x, 0), op(x, 1), op(x, -1), op(x, 2))),
            [
                (
                    "strided_0d",
                    lambda dt: [transposed([3, 4], dt), mk([], dt)],
                    lambda op, x, z: (op(x, 1), op(z, 0), op(z, -1)),
                )
            ],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.squeeze.default",
        ALL,
        movement(
            lambda dt: ([mk([1, 3, 1, 4], dt)], lambda op, x: op(x)),
            [
                (
                    "0d_ones",
                    lambda dt: [mk([], dt), mk([1, 1], dt), mk([2, 0, 1], dt)],
                    lambda op, z, o, e: (op(z), op(o), op(e)),
                )
            ],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.squeeze.dim",
        ALL,
        movement(
            lambda dt: (
                [mk([1, 3, 1, 4], dt)],
                lambda op, x: (op(x, 0), op(x, 2), op(x, -2), op(x, 1)),
            ),
            [
                (
                    "0d_strided",
                    lambda dt: [mk([], dt), transposed([1, 4], dt)],
                    lambda op, z, x: (op(z, 0), op(z, -1), op(x, 0), op(x, 1)),
                )
            ],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.squeeze.dims",
        ALL,
        movement(
            lambda dt: (
                [mk([1, 3, 1, 4], dt)],
                lambda op, x: (op(x, [0, 2]), op(x, [-2]), op(x, [1, 2]), op(x, [])),
            ),
            [("0d", lambda dt: [mk([], dt)], lambda op, z: (op(z, [0]), op(z, [])))],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.clone.default",
        ALL,
        movement(
            lambda dt: ([mk([2, 3], dt)], lambda op, x: op(x)),
            [
                (
                    "strided",
                    lambda dt: [transposed([3, 4], dt), mk([2, 3, 4, 5], dt), expanded([3, 4], dt)],
                    lambda op, x, y, z: (
                        op(x),
                        op(x, memory_format=torch.contiguous_format),
                        op(y, memory_format=torch.channels_last),
                        op(x, memory_format=torch.preserve_format),
                        op(z),
                    ),
                ),
                (
                    "0d_size0",
                    lambda dt: [mk([], dt), mk([0, 2], dt)],
                    lambda op, z, e: (op(z), op(e)),
                ),
            ],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.alias.default",
        ALL,
        movement(
            lambda dt: ([mk([2, 3], dt)], lambda op, x: op(x)),
            [
                (
                    "strided",
                    lambda dt: [transposed([3, 4], dt), mk([], dt)],
                    lambda op, x, z: (op(x), op(z)),
                )
            ],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.detach.default",
        ALL,
        movement(
            lambda dt: ([mk([2, 3], dt)], lambda op, x: op(x)),
            [
                (
                    "strided",
                    lambda dt: [transposed([3, 4], dt), mk([], dt)],
                    lambda op, x, z: (op(x), op(z)),
                )
            ],
        ),
        tol=EXACT,
        direct="make_fx records detach as alias",
    ),
    Row(
        "aten.lift_fresh_copy.default",
        ALL,
        movement(
            lambda dt: ([mk([2, 3], dt)], lambda op, x: op(x)),
            [
                (
                    "strided",
                    lambda dt: [transposed([3, 4], dt), mk([], dt)],
                    lambda op, x, z: (op(x), op(z)),
                )
            ],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.permute.default",
        ALL,
        movement(
            lambda dt: (
                [mk([2, 3, 4], dt)],
                lambda op, x: (op(x, [2, 0, 1]), op(x, [-1, -3, -2]), op(x, [0, 1, 2])),
            ),
            [
                (
                    "strided_0d",
                    lambda dt: [transposed([3, 4], dt), mk([], dt)],
                    lambda op, x, z: (op(x, [1, 0]), op(x, [0, 1]), op(z, [])),
                )
            ],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.transpose.int",
        ALL,
        movement(
            lambda dt: (
                [mk([2, 3, 4], dt)],
                lambda op, x: (op(x, 0, 2), op(x, -1, -2), op(x, 1, 1)),
            ),
            [
                (
                    "strided_0d_1d",
                    lambda dt: [transposed([3, 4], dt), mk([], dt), mk([3], dt)],
                    lambda op, x, z, v: (op(x, 0, 1), op(z, 0, 0), op(z, 0, -1), op(v, 0, -1)),
                )
            ],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.t.default",
        ALL,
        movement(
            lambda dt: ([mk([2, 3], dt)], lambda op, x: op(x)),
            [
                (
                    "strided_0d_1d",
                    lambda dt: [transposed([3, 4], dt), mk([], dt), mk([3], dt)],
                    lambda op, x, z, v: (op(x), op(z), op(v)),
                )
            ],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.expand.default",
        ALL,
        movement(
            lambda dt: (
                [mk([3, 1], dt)],
                lambda op, x: (op(x, [2, 3, 4]), op(x, [-1, 5]), op(x, [3, 1])),
            ),
            [
                (
                    "0d_size0_strided",
                    lambda dt: [mk([], dt), mk([1, 3], dt), sliced([3, 1], dt)],
                    lambda op, z, r, s: (op(z, [2, 2]), op(z, []), op(r, [0, 3]), op(s, [2, 3, 4])),
                )
            ],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.slice.Tensor",
        ALL,
        movement(
            lambda dt: (
                [mk([4, 6], dt)],
                lambda op, x: (
                    op(x, 1, 1, 5, 2),
                    op(x, 0, -3),
                    op(x, 1, 2, INT64_MAX),
                    op(x, -1, None, None, 3),
                    op(x, 0, 3, 1),
                    op(x, 1, -100, 2),
                    op(x, 0, 0, 4, 1),
                    op(x, 0, 4),
                    op(x, 1, 10, 20),
                ),
            ),
            [("strided", TX(4, 6), lambda op, x: (op(x, 0, 1, 5, 2), op(x, 1, 2, 3)))],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.select.int",
        ALL,
        movement(
            lambda dt: (
                [mk([3, 4, 2], dt)],
                lambda op, x: (op(x, 0, 1), op(x, 1, -1), op(x, -1, 0), op(x, 2, 1)),
            ),
            [
                (
                    "strided_1d_size0",
                    lambda dt: [transposed([3, 4], dt), mk([5], dt), mk([0, 3], dt)],
                    lambda op, x, v, e: (op(x, 0, 2), op(x, 1, -4), op(v, 0, 3), op(e, 1, 2)),
                )
            ],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.cat.default",
        ALL,
        movement(
            lambda dt: (
                [mk([2, 3], dt), mk([1, 3], dt), mk([2, 2], dt)],
                lambda op, a, b, c: (op([a, b]), op([a, c], 1), op([a, b, a], -2), op([a])),
            ),
            [
                (
                    "strided_size0",
                    lambda dt: [
                        transposed([3, 4], dt),
                        mk([0, 4], dt),
                        mk([0], dt),
                        sliced([3, 2], dt),
                    ],
                    lambda op, a, e, e1, s: (
                        op([a, e, a]),
                        op([e1, a, e1]),
                        op([a, s], 1),
                        op([e, e]),
                    ),
                ),
                (
                    "promotion",
                    lambda dt: [mk([2], dt), mk([3], f64), mk([1], b8), mk([2], i8)],
                    lambda op, a, b, c, d: (op([a, b]), op([c, a]), op([d, a, c])),
                ),
            ],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.split.Tensor",
        ALL,
        movement(
            lambda dt: (
                [mk([5, 4], dt)],
                lambda op, x: (*op(x, 2), *op(x, 3, 1), *op(x, 5), *op(x, 7, -1)),
            ),
            [
                (
                    "strided_size0",
                    lambda dt: [transposed([3, 4], dt), mk([0, 2], dt)],
                    lambda op, x, e: (*op(x, 2, 1), *op(e, 2), *op(e, 1, 1)),
                )
            ],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.split_with_sizes.default",
        ALL,
        movement(
            lambda dt: (
                [mk([5, 4], dt)],
                lambda op, x: (*op(x, [2, 3]), *op(x, [1, 0, 3], 1), *op(x, [5])),
            ),
            [("strided", TX(3, 4), lambda op, x: (*op(x, [1, 3], 1), *op(x, [2, 1])))],
        ),
        tol=EXACT,
    ),
    Row(
        "aten.copy.default",
        ALL,
        movement(
            lambda dt: (
                [mk([2, 3], dt), mk([2, 3], dt), mk([3], dt)],
                lambda op, d, s, r: (op(d, s), op(d, r)),
            ),
            [
                (
                    "strided_promotion",
                    lambda dt: [
                        transposed([3, 4], dt),
                        mk([3, 4], f64, -100, 100),
                        sliced([4], dt),
                        mk([], b8),
                        mk([], dt),
                    ],
                    lambda op, d, s, r, z, w: (op(d, s), op(d, r), op(d, z), op(z, w)),
                )
            ],
        ),
        tol=EXACT,
    ),
]


def pow_scalar_samples(dt):
    """``pow.Scalar(base, exponent)``: Python-scalar bases with tensor exponents."""
    if dt.is_floating_point:
        e = specials(dt)
        bases = [2, 2.5, -2, 0, 1, -1.5, 0.0, nan, inf]
    else:
        lo = 0 if dt == u8 else -3
        e = mk([12], dt, lo, 5)
        bases = [2, -3, 1, 0, 2.5, -1]
    out = [S("bases", [e], lambda op, x: tuple(op(b, x) for b in bases))]
    if dt in PRIMARY:
        out.append(
            S(
                "strided_0d",
                [transposed([3, 4], dt, 0, 3), mk([], dt, 0, 3)],
                lambda op, x, z: (op(2, x), op(3, z)),
            )
        )
    return out


def _int_pow_edges(dt):
    return [tensor([0, 1, -1, 2, -2, 3, 0, 5], dt), tensor([-1, -1, -3, -1, -2, 0, 0, 3], dt)]


# Integer pow with negative exponents (PyTorch: 1 for base 1, +-1 for base -1, else 0 -- base 0
# included) and uint8 with exponents above 127 (unsigned, so never negative).
EXTRA_SAMPLES = {
    ("aten.pow.Tensor_Tensor", i64): [
        S("negative_exponent", _int_pow_edges(i64), lambda op, a, b: op(a, b))
    ],
    ("aten.pow.Tensor_Tensor", i32): [
        S("negative_exponent", _int_pow_edges(i32), lambda op, a, b: op(a, b))
    ],
    ("aten.pow.Tensor_Tensor", u8): [
        S(
            "large_exponent",
            [tensor([3, 2, 5, 7, 1], u8), tensor([200, 7, 255, 130, 250], u8)],
            lambda op, a, b: op(a, b),
        )
    ],
    ("aten.pow.Scalar", i64): [
        S(
            "negative_exponent",
            [tensor([-1, -2, -3, 0, 1], i64)],
            lambda op, x: (op(0, x), op(1, x), op(-1, x), op(2, x)),
        )
    ],
}

# Python ints outside a narrow integer dtype's range wrap into it, as PyTorch casts the scalar.
for _op in ("aten.add.Tensor", "aten.add.Scalar", "aten.mul.Tensor", "aten.sub.Scalar"):
    for _dt in (u8, i8):
        EXTRA_SAMPLES[(_op, _dt)] = [
            S(
                "wrapping_scalars",
                [tensor([0, 1, 100, -7], _dt)],
                lambda op, a: (op(a, 300), op(a, -1), op(a, 1000), op(a, -129)),
            )
        ]

ROW_BY_OP = {row.op: row for row in ROWS}

#: Expected failures: (op, dtype name | sample id | "dtype/sample id") -> reason. Only for
#: semantic gaps between PyTorch and the compiler that cannot be fixed, never for bugs.
_GELU_INF = (
    "PyTorch's vectorised CPU gelu (float32, and the halves computed through it) returns NaN "
    "for +inf, while its scalar path and float64 return inf, the limit; the compiler returns inf"
)
_LAYER_NORM_INF = (
    "PyTorch's Welford row moments give mean NaN for a row holding +-inf; the compiler's sum / n "
    "gives +-inf (the normalised output and rstd agree: NaN)"
)
_LAYER_NORM_STATS_DTYPE = (
    "for bfloat16 input with float32 weight, PyTorch's meta function records bfloat16 mean/rstd "
    "while its CPU kernel returns float32; the compiler writes the dtype the graph records (the "
    "values agree)"
)
XFAIL: dict[tuple[str, str], str] = {
    ("aten.gelu.default", "float32/plus_inf"): _GELU_INF,
    ("aten.gelu.default", "float16/plus_inf"): _GELU_INF,
    ("aten.gelu.default", "bfloat16/plus_inf"): _GELU_INF,
    ("aten.native_layer_norm.default", "inf_row"): _LAYER_NORM_INF,
    ("aten.native_layer_norm.default", "half_input_float_weight_stats"): _LAYER_NORM_STATS_DTYPE,
}


#: Samples merged into one graph each, to save compiles: value-level cases ("values") and
#: layout cases ("layouts": non-contiguous, 0-d, size-0). Other samples (pointed cases, those
#: with an expected failure) stay graphs of their own.
VALUES = {"broadcast", "edge", "scalars", "random", "ties", "nan_inf", "half_rounding", "to_all",
          "double_rounding", "corrections", "single", "weights", "bias_shapes", "beta_alpha",
          "beta0_nan_bias", "bases", "basic", "shapes"}  # fmt: skip
LAYOUTS = {"strided", "0d", "empty", "0d_empty", "size0", "vector_shapes", "strided_0d",
           "strided_0d_1d", "strided_1d_size0", "0d_size0", "sliced_rows", "0d_ones", "0d_strided",
           "strided_size0", "strided_promotion", "0d_size0_strided", "promotion"}  # fmt: skip


def _regroup(samples: list[Sample]) -> list[Sample]:
    values = [s for s in samples if s.id in VALUES]
    layouts = [s for s in samples if s.id in LAYOUTS]
    rest = [s for s in samples if s.id not in VALUES | LAYOUTS]
    return merge("values", values) + merge("layouts", layouts) + rest


def _samples(row: Row, dt: torch.dtype) -> list[Sample]:
    reseed(zlib.crc32(f"{row.op}/{NAME[dt]}".encode()))
    return _regroup(row.samples(dt)) + EXTRA_SAMPLES.get((row.op, dt), [])


def _mixed(row: Row) -> list[Sample]:
    reseed(zlib.crc32(f"{row.op}/mixed".encode()))
    return row.mixed() if row.mixed else []


def _params():
    params = []
    for row in ROWS:
        cases = [(NAME[dt], s) for dt in row.dtypes for s in _samples(row, dt)]
        cases += [("mixed", s) for s in _mixed(row)]
        for label, sample in cases:
            reason = None
            for key in (label, sample.id, f"{label}/{sample.id}"):
                reason = reason or XFAIL.get((row.op, key))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(
                pytest.param(row, sample, id=f"{row.op}-{label}-{sample.id}", marks=marks)
            )
    return params


@pytest.mark.parametrize("row, sample", _params())
def test_op(row: Row, sample: Sample):
    check(row, sample)


def test_every_registered_op_has_a_row():
    registered = set(fxmlir.supported_ops())
    assert not registered - set(ROW_BY_OP), (
        f"registered ops without a numeric row: {sorted(registered - set(ROW_BY_OP))}"
    )
    assert not set(ROW_BY_OP) - registered, (
        f"rows for unregistered ops: {sorted(set(ROW_BY_OP) - registered)}"
    )
    assert len(ROW_BY_OP) == len(ROWS), "an op has two rows"


def test_xfail_keys_name_real_cases():
    labels = {
        (row.op, key)
        for row in ROWS
        for dt in row.dtypes
        for s in _samples(row, dt)
        for key in (NAME[dt], s.id, f"{NAME[dt]}/{s.id}")
    }
    labels |= {
        (row.op, key)
        for row in ROWS
        for s in _mixed(row)
        for key in ("mixed", s.id, f"mixed/{s.id}")
    }
    assert not set(XFAIL) - labels, (
        f"XFAIL entries that match no test: {sorted(set(XFAIL) - labels)}"
    )


@pytest.mark.parametrize("row", ROWS, ids=[r.op for r in ROWS])
def test_dtype_list_matches_eager(row: Row):
    """A row lists exactly the dtypes (among ``ALL``) eager PyTorch runs its first sample for."""
    accepted = []
    for dt in ALL:
        sample = _samples(row, dt)[0]
        try:
            eager(row, sample)
        except (RuntimeError, TypeError, ValueError):
            continue
        accepted.append(dt)
    assert [NAME[d] for d in accepted] == [NAME[d] for d in row.dtypes]
