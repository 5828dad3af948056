"""Lowerings written in Python (``fxmlir.lowerings``): MLIR text per node, in upstream
dialects or one loaded in IRDL, lowered further by a stage of one's own. The vendor flow end
to end: a ``torch.library`` op lowered into the ``xacc`` dialect, a PDL stage lowering that to
upstream ops, the default JIT; overriding fxmlir's own row for some nodes, and taking it
out (one table holds fxmlir's rows and the registered ones)."""

import pathlib
import subprocess

import fxmlir
import pytest
import torch
from fxmlir import lowerings, partition

LIT = pathlib.Path(__file__).resolve().parents[2] / "lit-tests"
XACC = LIT.parent / "examples" / "xacc" / "fxmlir_xacc"
XACC_IRDL = XACC / "xacc.irdl.mlir"
XACC_TO_MATH = (XACC / "xacc_to_upstream.pdl.mlir").read_text()
TO_LINALG = "builtin.module(func.func(convert-elementwise-to-linalg))"

LIB = torch.library.Library("fxmlir_test", "DEF")
LIB.define("scaled_tanh(Tensor x, float scale) -> Tensor")


@torch.library.impl(LIB, "scaled_tanh", "CompositeExplicitAutograd")
def _scaled_tanh(x, scale):
    return torch.tanh(x) * scale


@torch.library.register_fake("fxmlir_test::scaled_tanh")
def _scaled_tanh_fake(x, scale):
    return torch.empty_like(x)


def scaled_tanh_mlir(call: lowerings.Call) -> str:
    """xacc.tanh, then a multiplication by the node's scale (a scalar argument, baked in)."""
    (x,), (out,) = call.inputs, call.outputs
    scale = float(call.node.args[1])
    return f"""
    func.func @lowering(%x: {x}) -> {out} {{
      %t = "xacc.tanh"(%x) : ({x}) -> {out}
      %s = arith.constant dense<{scale:e}> : {out}
      %y = arith.mulf %t, %s : {out}
      return %y : {out}
    }}"""


@pytest.fixture
def xacc():
    """The row and the xacc settings a vendor would install: the dialect, and the stage that
    lowers it (PDL) and makes the elementwise ops on tensors linalg."""
    lowerings.register("fxmlir_test::scaled_tanh", scaled_tanh_mlir, origin="xacc")
    stage = fxmlir.Stage("xacc-to-upstream", pdl=XACC_TO_MATH, passes=TO_LINALG)
    with fxmlir.config.patch(dialects=[str(XACC_IRDL)], stages=[stage.before("fusion")]):
        yield
    lowerings.unregister("fxmlir_test::scaled_tanh")


def _model(x):
    return torch.ops.fxmlir_test.scaled_tanh(x @ x.T, 0.5) + 1


def test_a_custom_op_lowers_into_a_dialect_of_ones_own(xacc, tmp_path, mlir_opt):
    torch.manual_seed(0)
    x = torch.randn(6, 10)
    torch._dynamo.reset()
    with torch.no_grad(), fxmlir.config.patch(dump_dir=str(tmp_path), fallback="error"):
        actual = torch.compile(_model, backend="fxmlir")(x)
    torch.testing.assert_close(actual, _model(x), rtol=1e-5, atol=1e-6)
    (lowered,) = tmp_path.glob("*.00-input.mlir")
    text = lowered.read_text()
    assert '"xacc.tanh"' in text
    assert "fxmlir_test.scaled_tanh.default" in text, "the op's location names the node"
    # The node is fxmlir's boundary op, naming the op and who lowered it.
    assert '"fxmlir.external"' in text and 'op = "fxmlir_test.scaled_tanh.default"' in text
    # Stock mlir-opt reads the dump with the IRDL written beside it (fxmlir's dialect and
    # xacc's), as the dump's first line says.
    graph = lowered.name.split(".")[0]
    irdl = lowered.with_name(f"{graph}.irdl.mlir")
    assert text.splitlines()[0].endswith(f"mlir-opt --irdl-file={irdl.name} <this file>")
    assert "irdl.dialect @xacc" in irdl.read_text()
    subprocess.run(
        [str(mlir_opt), f"--irdl-file={irdl}", str(lowered)],
        check=True,
        capture_output=True,
    )
    (upstream,) = tmp_path.glob("*.03-xacc-to-upstream.mlir")
    assert "xacc." not in upstream.read_text()


LIB.define("add_row(Tensor x, Tensor row) -> (Tensor, Tensor)")


@torch.library.impl(LIB, "add_row", "CompositeExplicitAutograd")
def _add_row(x, row):
    return x + row, row.sum()


@torch.library.register_fake("fxmlir_test::add_row")
def _add_row_fake(x, row):
    return torch.empty_like(x), row.new_empty(())


def add_row_mlir(call: lowerings.Call) -> str:
    """A matrix plus a row broadcast down it, and the row's sum: arguments and results of
    different types."""
    (x, row), (out, total) = call.inputs, call.outputs
    maps = "affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>"
    return f"""
    func.func @lowering(%x: {x}, %r: {row}) -> ({out}, {total}) {{
      %e = tensor.empty() : {out}
      %y = linalg.generic {{indexing_maps = [{maps}],
                            iterator_types = ["parallel", "parallel"]}}
          ins(%x, %r : {x}, {row}) outs(%e : {out}) {{
        ^bb0(%a: f32, %b: f32, %c: f32):
          %s = arith.addf %a, %b : f32
          linalg.yield %s : f32
      }} -> {out}
      %zero = arith.constant 0.0 : f32
      %z = tensor.empty() : {total}
      %init = linalg.fill ins(%zero : f32) outs(%z : {total}) -> {total}
      %t = linalg.reduce ins(%r : {row}) outs(%init : {total}) dimensions = [0]
        (%in: f32, %acc: f32) {{
          %sum = arith.addf %in, %acc : f32
          linalg.yield %sum : f32
        }}
      return %y, %t : {out}, {total}
    }}"""


def test_a_lowering_takes_and_gives_values_of_different_types(tmp_path, mlir_opt):
    """``fxmlir.external`` holds each argument and output in a slot of its own, so that they
    may differ in type (one IRDL variadic makes its values share one): the kernel matches
    eager, and stock mlir-opt reads the dump."""

    def fn(x, row):
        y, total = torch.ops.fxmlir_test.add_row(x * 2, row)
        return y + total

    lowerings.register("fxmlir_test::add_row", add_row_mlir, origin="test")
    try:
        torch._dynamo.reset()
        x, row = torch.randn(4, 6), torch.randn(6)
        with fxmlir.config.patch(dump_dir=str(tmp_path), fallback="error"):
            actual = torch.compile(fn, backend="fxmlir")(x, row)
        torch.testing.assert_close(actual, fn(x, row))
    finally:
        lowerings.unregister("fxmlir_test::add_row")
    (lowered,) = tmp_path.glob("*.00-input.mlir")
    text = lowered.read_text()
    assert "operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>" in text
    assert "resultSegmentSizes = array<i32: 1, 1, 0, 0, 0>" in text
    irdl = lowered.with_name(f"{lowered.name.split('.')[0]}.irdl.mlir")
    subprocess.run(
        [str(mlir_opt), f"--irdl-file={irdl}", str(lowered)], check=True, capture_output=True
    )


def _negate_rows(call: lowerings.Call) -> str:
    (x,), (out,) = call.inputs, call.outputs
    rank = len(call.node.meta["val"].shape)
    dims = ", ".join(f"d{i}" for i in range(rank))
    identity = f"affine_map<({dims}) -> ({dims})>"
    parallel = ", ".join(['"parallel"'] * rank)
    return f"""
    func.func @lowering(%x: {x}) -> {out} {{
      %e = tensor.empty() : {out}
      %y = linalg.generic {{indexing_maps = [{identity}, {identity}],
                            iterator_types = [{parallel}]}}
          ins(%x : {x}) outs(%e : {out}) {{
        ^bb0(%a: f32, %b: f32):
          %two = arith.constant 2.0 : f32
          %m = arith.mulf %a, %two : f32
          linalg.yield %m : f32
      }} -> {out}
      return %y : {out}
    }}"""


def test_a_row_overrides_fxmlirs_own_for_the_nodes_it_supports():
    """A (deliberately wrong) neg that doubles f32 inputs: f32 nodes take it, f64 nodes keep
    fxmlir's own row; both compile (strict mode)."""
    lowerings.register(
        torch.ops.aten.neg.default,
        _negate_rows,
        supports=lambda node: node.meta["val"].dtype == torch.float32,
        origin="test",
    )
    try:
        for dtype, expected in [(torch.float32, 2.0), (torch.float64, -1.0)]:
            torch._dynamo.reset()
            x = torch.ones(3, 4, dtype=dtype)
            with fxmlir.config.patch(fallback="error"):
                actual = torch.compile(torch.neg, backend="fxmlir")(x)
            torch.testing.assert_close(actual, torch.full_like(x, expected))
    finally:
        lowerings.unregister(torch.ops.aten.neg.default)


def test_fxmlirs_own_rows_are_in_the_table_beneath_registered_ones():
    (own,) = lowerings.rows(torch.ops.aten.neg.default)
    assert (own.origin, own.mlir) == (lowerings.FXMLIR, None)
    assert set(fxmlir.supported_ops()) <= lowerings.registered()
    lowerings.register(torch.ops.aten.neg.default, _negate_rows, origin="test")
    try:
        assert [r.origin for r in lowerings.rows("aten.neg.default")] == ["test", "fxmlir"]
        with pytest.raises(ValueError, match="fxmlir's own rows"):
            lowerings.register(torch.ops.aten.neg.default, _negate_rows, origin="fxmlir")
    finally:
        lowerings.unregister(torch.ops.aten.neg.default)
    assert [r.origin for r in lowerings.rows("aten.neg.default")] == ["fxmlir"]


def _tanh_then_add(x):
    return torch.tanh(x) + 1


def test_taking_fxmlirs_own_row_out_runs_the_op_eagerly():
    """Without fxmlir's row, tanh has no lowering (core ATen does not decompose it): it runs
    eagerly, with its reason recorded, and strict mode names it; putting the rows back
    compiles it again."""
    x = torch.randn(3, 4)
    lowerings.unregister(torch.ops.aten.tanh.default, origin=lowerings.FXMLIR)
    try:
        assert not lowerings.rows(torch.ops.aten.tanh.default)
        torch._dynamo.reset()
        before = max((f.seq for f in partition.fallbacks), default=-1)
        actual = torch.compile(_tanh_then_add, backend="fxmlir")(x)
        torch.testing.assert_close(actual, _tanh_then_add(x))
        eager = [f for f in partition.fallbacks if f.seq > before]
        assert [(f.op, f.reason) for f in eager] == [
            ("aten.tanh.default", "no lowering is registered")
        ]
        torch._dynamo.reset()
        with fxmlir.config.patch(fallback="error"), pytest.raises(Exception, match="tanh"):
            torch.compile(_tanh_then_add, backend="fxmlir")(x)
    finally:
        lowerings.add_fxmlirs_own()
    torch._dynamo.reset()
    with fxmlir.config.patch(fallback="error"):
        actual = torch.compile(_tanh_then_add, backend="fxmlir")(x)
    torch.testing.assert_close(actual, _tanh_then_add(x))


@pytest.mark.parametrize(
    ("mlir", "message"),
    [
        (lambda call: "func.func @lowering(", "xacc lowering: its MLIR does not parse"),
        (
            lambda call: (
                f"func.func @f() -> {call.outputs[0]} {{ %e = tensor.empty() : "
                f"{call.outputs[0]}\n return %e : {call.outputs[0]} }}"
            ),
            "its function takes 0 arguments; the node has 1 tensor arguments",
        ),
        (lambda call: 42, "returned int, not MLIR text"),
        (lambda call: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_a_broken_lowering_is_named(mlir, message):
    lowerings.register("fxmlir_test::scaled_tanh", mlir, origin="xacc")
    try:
        torch._dynamo.reset()
        with fxmlir.config.patch(fallback="error"), pytest.raises(Exception) as e:
            torch.compile(_model, backend="fxmlir")(torch.randn(4, 4))
        assert message in str(e.value)
        assert "scaled_tanh" in str(e.value)
    finally:
        lowerings.unregister("fxmlir_test::scaled_tanh")


def _wrong_then_right(x):
    y = torch.neg(x)
    return torch.exp(y) + 1


def test_the_golden_check_names_the_first_op_that_differs():
    """``config.golden`` runs every compiled call against eager: a correct graph passes, and
    a (deliberately wrong) row is reported at its node and source line."""
    x = torch.randn(3, 4)
    torch._dynamo.reset()
    with fxmlir.config.patch(golden=True):
        actual = torch.compile(_wrong_then_right, backend="fxmlir")(x)
    torch.testing.assert_close(actual, _wrong_then_right(x))
    lowerings.register(torch.ops.aten.neg.default, _negate_rows, origin="test")
    try:
        torch._dynamo.reset()
        with fxmlir.config.patch(golden=True), pytest.raises(fxmlir.GoldenMismatch) as e:
            torch.compile(_wrong_then_right, backend="fxmlir")(x)
    finally:
        lowerings.unregister(torch.ops.aten.neg.default)
    message = str(e.value)
    assert "output 0 differs from eager PyTorch" in message
    assert "aten.neg.default" in message and "test_lowerings.py" in message, message
