"""torch.compile integration: registration, real modules against eager, graph breaks,
recompiles on new shapes, non-contiguous inputs and output conventions."""

import subprocess
import sys

import fxmlir
import torch
import torch.nn as nn
from records import latest, since

ATOL = RTOL = 1e-5


def compiles_since(start: int) -> list:
    return since(start)


def test_backend_is_listed_and_works_without_importing_fxmlir():
    code = (
        "import torch\n"
        "assert 'fxmlir' in torch._dynamo.list_backends(), torch._dynamo.list_backends()\n"
        "f = torch.compile(lambda x: torch.tanh(x) * 2, backend='fxmlir')\n"
        "x = torch.randn(5)\n"
        "torch.testing.assert_close(f(x), torch.tanh(x) * 2)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_mlp_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8), nn.Softmax(dim=-1)
    ).eval()
    x = torch.randn(4, 16)
    with torch.no_grad():
        expected = model(x)
        actual = torch.compile(model, backend="fxmlir")(x)
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)


def test_graph_break_gives_several_graphs_that_match_eager():
    def fn(x, y):
        a = torch.sin(x) + y
        torch._dynamo.graph_break()
        b = a.sum(dim=0) * torch.cos(y)
        return b.relu()

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    start = latest()
    actual = torch.compile(fn, backend="fxmlir")(x, y)
    torch.testing.assert_close(actual, fn(x, y), atol=ATOL, rtol=RTOL)
    assert len(compiles_since(start)) == 2


def test_new_input_shape_recompiles_correctly():
    def fn(x):
        return torch.softmax(x * 3.0, dim=-1) + x.mean(dim=0, keepdim=True)

    compiled = torch.compile(fn, backend="fxmlir")
    for shape in [(4, 8), (6, 8), (6, 5), (4, 8), (9, 3)]:
        x = torch.randn(shape)
        torch.testing.assert_close(compiled(x), fn(x), atol=ATOL, rtol=RTOL)


def test_static_recompile_when_dynamic_is_off():
    compiled = torch.compile(lambda x: x.exp() - 1, backend="fxmlir", dynamic=False)
    start = latest()
    for n in (3, 7, 3):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), x.exp() - 1)
    assert len(compiles_since(start)) == 2


def test_non_contiguous_inputs_are_honoured():
    def fn(x, y):
        return x * 2 + y

    base = torch.randn(8, 6)
    x = base.t()  # strides (1, 6)
    y = torch.randn(6, 16)[:, ::2]  # strides (16, 2)
    compiled = torch.compile(fn, backend="fxmlir")
    torch.testing.assert_close(compiled(x, y), fn(x, y))
    z = torch.randn(1, 8).expand(6, 8)  # stride 0
    torch.testing.assert_close(compiled(x, z), fn(x, z))


def test_multiple_outputs_and_passthrough():
    def fn(x):
        m = x.amax(dim=1)
        return m, x, m * 2, x.shape[0]

    x = torch.randn(3, 4)
    got = torch.compile(fn, backend="fxmlir")(x)
    want = fn(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] is x or torch.equal(got[1], x)
    torch.testing.assert_close(got[2], want[2])
    assert got[3] == 3


def test_tensor_constants_of_every_rank_are_baked_in():
    # torch.tensor(...) in the traced code becomes a constant of the graph (get_attr): a 0-dim
    # one (the scalars of detection models' post-processing), an empty one and a 1-D one.
    def fn(x):
        scale = torch.tensor(2.5)
        offsets = torch.tensor([1.0, 2.0, 3.0])
        flags = torch.tensor(True)
        none = torch.zeros(0)
        return torch.where(flags, x * scale + offsets, x), torch.cat([x.flatten(), none])

    x = torch.randn(4, 3)
    with torch.no_grad():
        got = torch.compile(fn, backend="fxmlir")(x)
    for g, w in zip(got, fn(x)):
        torch.testing.assert_close(g, w, atol=ATOL, rtol=RTOL)


def test_integer_and_bool_graphs():
    def fn(a, b):
        return (a * 3 - b) // 2, (a > b) != (a == 0), torch.where(a > 0, a, b).sum()

    a = torch.randint(-5, 5, (4, 5))
    b = torch.randint(-5, 5, (4, 5))
    got = torch.compile(fn, backend="fxmlir")(a, b)
    for g, w in zip(got, fn(a, b)):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w)


def test_direct_compile_graph_and_supported_ops():
    ops = fxmlir.supported_ops()
    assert ops["aten.mm.default"] == "linear"
    assert "aten.native_layer_norm.default" in ops
    assert "default" in fxmlir.pipelines()


def test_backward_graphs_compile_and_match_eager_gradients():
    from fxmlir.demo import TransformerBlock

    torch.manual_seed(0)
    model = TransformerBlock(d_model=32, heads=2, d_ff=64)
    x = torch.randn(2, 8, 32)
    model(x).square().mean().backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    start = latest()
    torch.compile(model, backend="fxmlir")(x).square().mean().backward()
    assert len(compiles_since(start)) == 2  # forward and backward
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], atol=1e-5, rtol=1e-4, msg=name)


def test_reductions_sharing_an_init_write_their_own_outputs():
    # Regression: CSE merges the zero-filled inits of both sums; each output must still start
    # from zeros rather than from the other reduction's result.
    def fn(x, y):
        return (x * y).sum(dim=(0, 1)), x.sum(dim=(0, 1))

    x, y = torch.randn(2, 8, 32), torch.randn(2, 8, 32)
    got = torch.compile(fn, backend="fxmlir")(x, y)
    for g, w in zip(got, fn(x, y)):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_identical_graphs_reuse_one_kernel():
    def fn(x):
        return torch.tanh(x) * 0.5 + 1.0

    x = torch.randn(7, 3)
    start = latest()
    torch.compile(fn, backend="fxmlir")(x)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(fn, backend="fxmlir")(x), fn(x))
    first, second = compiles_since(start)
    assert first.name != second.name
    assert second.cached and second.timings == ()


def test_bool_results_of_a_matrix_product():
    # Regression: a comparison consuming a vectorised product must not be written as packed
    # i1 vectors into a byte-per-element bool buffer.
    def fn(a, b):
        p = a @ b
        return p > 0, torch.isnan(p)

    a, b = torch.randn(64, 64), torch.randn(64, 64)
    got = torch.compile(fn, backend="fxmlir")(a, b)
    for g, w in zip(got, fn(a, b)):
        assert torch.equal(g, w)


def test_attention_reaches_fxmlir_whole_and_matches_eager(tmp_path):
    """``F.scaled_dot_product_attention`` (as CPU flash attention) is lowered natively, not
    decomposed: with a boolean padding mask (which PyTorch turns into an additive one) and
    causally."""
    import torch.nn.functional as F

    def fn(q, k, v, keep):
        return (
            F.scaled_dot_product_attention(q, k, v, attn_mask=keep),
            F.scaled_dot_product_attention(q, k, v, is_causal=True),
        )

    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    keep = torch.rand(2, 1, 6, 6) > 0.3
    keep[..., 0] = True
    with torch.no_grad(), fxmlir.config.patch(fallback="error", dump_dir=str(tmp_path)):
        torch._dynamo.reset()
        actual = torch.compile(fn, backend="fxmlir")(q, k, v, keep)
    for a, e in zip(actual, fn(q, k, v, keep)):
        torch.testing.assert_close(a, e, atol=ATOL, rtol=RTOL)
    graphs = "".join(p.read_text() for p in tmp_path.glob("*.fx.json"))
    assert graphs.count('"aten._scaled_dot_product_flash_attention_for_cpu.default"') == 2
    assert '"aten.bmm.default"' not in graphs
