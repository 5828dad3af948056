// fxmlir's own dialect. Each op stands for one graph node that fxmlir lowers as a whole:
// its operands are the node's tensor arguments, its results the node's outputs, and its
// `decomposition` names a private function of the same module that computes it in upstream
// dialects (or in a dialect a plugin loaded). The `expand` stage, first in the pipeline,
// inlines the decompositions; a stage placed before it sees the ops whole and may replace
// them (a vendor's instruction for a bf16 pair product, say). Stock MLIR parses any dump
// with `mlir-opt --irdl-file=dialects/fxmlir.irdl.mlir`.
irdl.dialect @fxmlir {
  // `left @ right` with `left` (m x k, bf16) and `right` packed as bf16 pairs
  // (k / 2 x n x 2, `pairs[k // 2, j, k % 2] = right[k, j]`), accumulated in f32:
  // `torch.ops.fxmlir.mm_pairs`, which the bf16 widening pass writes.
  irdl.operation @mm_pairs {
    %left = irdl.base "!builtin.tensor"
    %pairs = irdl.base "!builtin.tensor"
    %product = irdl.base "!builtin.tensor"
    %decomposition = irdl.base "#builtin.symbol_ref"
    irdl.operands(left: %left, pairs: %pairs)
    irdl.results(product: %product)
    irdl.attributes {"decomposition" = %decomposition}
  }

  // A convolution of a bf16 input (n x c x spatial...) with a weight packed as bf16 pairs
  // (out x c / 2 x kernel... x 2), accumulated in f32: `torch.ops.fxmlir.conv_pairs`.
  irdl.operation @conv_pairs {
    %input = irdl.base "!builtin.tensor"
    %pairs = irdl.base "!builtin.tensor"
    %output = irdl.base "!builtin.tensor"
    %decomposition = irdl.base "#builtin.symbol_ref"
    %stride = irdl.base "#builtin.dense_array"
    %padding = irdl.base "#builtin.dense_array"
    %dilation = irdl.base "#builtin.dense_array"
    irdl.operands(input: %input, pairs: %pairs)
    irdl.results(output: %output)
    irdl.attributes {
      "decomposition" = %decomposition,
      "stride" = %stride,
      "padding" = %padding,
      "dilation" = %dilation
    }
  }

  // A node lowered by a lowering registered outside fxmlir (`fxmlir.lowerings`, a plugin):
  // `op` is the node's ATen or custom op (`mylib.op.default`), `origin` who registered the
  // lowering, and the decomposition is the MLIR that lowering wrote.
  irdl.operation @external {
    %inputs = irdl.any
    %outputs = irdl.any
    %op = irdl.base "#builtin.string"
    %origin = irdl.base "#builtin.string"
    %decomposition = irdl.base "#builtin.symbol_ref"
    irdl.operands(inputs: variadic %inputs)
    irdl.results(outputs: variadic %outputs)
    irdl.attributes {"op" = %op, "origin" = %origin, "decomposition" = %decomposition}
  }
}
