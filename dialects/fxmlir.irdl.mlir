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

  // `left @ right [+ bias]` in f32 with `left` (m x k), `right` in panels of `w` columns
  // (panels x k x w, `panels[j / w, k, j % w] = right[k, j]`) and an optional `bias` (n):
  // `torch.ops.fxmlir.mm_panels`, which the f32 weight panels pass writes.
  irdl.operation @mm_panels {
    %left = irdl.base "!builtin.tensor"
    %panels = irdl.base "!builtin.tensor"
    %bias = irdl.base "!builtin.tensor"
    %product = irdl.base "!builtin.tensor"
    %decomposition = irdl.base "#builtin.symbol_ref"
    irdl.operands(left: %left, panels: %panels, bias: optional %bias)
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
  // lowering, and the decomposition is the MLIR that lowering wrote. Its operands are the
  // node's tensor arguments and its results the node's outputs, each in a slot of its own
  // (`operandSegmentSizes`, `resultSegmentSizes`: one a slot, in order), so that they may
  // differ in type: the values of one IRDL variadic must share one (up to 12 operands and 4
  // results; beyond, the rest share the last segment's type).
  irdl.operation @external {
    %i0 = irdl.any
    %i1 = irdl.any
    %i2 = irdl.any
    %i3 = irdl.any
    %i4 = irdl.any
    %i5 = irdl.any
    %i6 = irdl.any
    %i7 = irdl.any
    %i8 = irdl.any
    %i9 = irdl.any
    %i10 = irdl.any
    %i11 = irdl.any
    %more_inputs = irdl.any
    %o0 = irdl.any
    %o1 = irdl.any
    %o2 = irdl.any
    %o3 = irdl.any
    %more_outputs = irdl.any
    %op = irdl.base "#builtin.string"
    %origin = irdl.base "#builtin.string"
    %decomposition = irdl.base "#builtin.symbol_ref"
    irdl.operands(
      i0: optional %i0, i1: optional %i1, i2: optional %i2, i3: optional %i3,
      i4: optional %i4, i5: optional %i5, i6: optional %i6, i7: optional %i7,
      i8: optional %i8, i9: optional %i9, i10: optional %i10, i11: optional %i11,
      more_inputs: variadic %more_inputs
    )
    irdl.results(o0: optional %o0, o1: optional %o1, o2: optional %o2, o3: optional %o3, more_outputs: variadic %more_outputs)
    irdl.attributes {"op" = %op, "origin" = %origin, "decomposition" = %decomposition}
  }

  // The collectives of PyTorch's functional c10d API (`_c10d_functional.*`), compiled in
  // place: one op per collective, the input tensor its operand, the collective's result its
  // result, the op's other arguments attributes under their schema names. The decomposition
  // copies the input into a buffer of its own and calls back into the kernel's host, which
  // runs the collective in PyTorch's c10d and waits for it (`@fxmlir_host_call`).
  irdl.operation @all_reduce {
    %input = irdl.base "!builtin.tensor"
    %output = irdl.base "!builtin.tensor"
    %decomposition = irdl.base "#builtin.symbol_ref"
    %reduce_op = irdl.base "#builtin.string"
    %group_name = irdl.base "#builtin.string"
    irdl.operands(input: %input)
    irdl.results(output: %output)
    irdl.attributes {
      "decomposition" = %decomposition,
      "reduce_op" = %reduce_op,
      "group_name" = %group_name
    }
  }

  irdl.operation @broadcast {
    %input = irdl.base "!builtin.tensor"
    %output = irdl.base "!builtin.tensor"
    %decomposition = irdl.base "#builtin.symbol_ref"
    %src = irdl.base "#builtin.integer"
    %group_name = irdl.base "#builtin.string"
    irdl.operands(input: %input)
    irdl.results(output: %output)
    irdl.attributes {
      "decomposition" = %decomposition,
      "src" = %src,
      "group_name" = %group_name
    }
  }

  // The inputs of the `group_size` ranks, concatenated along the first dimension.
  irdl.operation @all_gather {
    %input = irdl.base "!builtin.tensor"
    %output = irdl.base "!builtin.tensor"
    %decomposition = irdl.base "#builtin.symbol_ref"
    %group_size = irdl.base "#builtin.integer"
    %group_name = irdl.base "#builtin.string"
    irdl.operands(input: %input)
    irdl.results(output: %output)
    irdl.attributes {
      "decomposition" = %decomposition,
      "group_size" = %group_size,
      "group_name" = %group_name
    }
  }

  // The reduction over the ranks of their inputs, of which this rank keeps its slice of the
  // first dimension.
  irdl.operation @reduce_scatter {
    %input = irdl.base "!builtin.tensor"
    %output = irdl.base "!builtin.tensor"
    %decomposition = irdl.base "#builtin.symbol_ref"
    %reduce_op = irdl.base "#builtin.string"
    %group_size = irdl.base "#builtin.integer"
    %group_name = irdl.base "#builtin.string"
    irdl.operands(input: %input)
    irdl.results(output: %output)
    irdl.attributes {
      "decomposition" = %decomposition,
      "reduce_op" = %reduce_op,
      "group_size" = %group_size,
      "group_name" = %group_name
    }
  }

  // Slices of the first dimension exchanged between the ranks (equal slices when the split
  // sizes are empty).
  irdl.operation @all_to_all {
    %input = irdl.base "!builtin.tensor"
    %output = irdl.base "!builtin.tensor"
    %decomposition = irdl.base "#builtin.symbol_ref"
    %output_split_sizes = irdl.base "#builtin.dense_array"
    %input_split_sizes = irdl.base "#builtin.dense_array"
    %group_name = irdl.base "#builtin.string"
    irdl.operands(input: %input)
    irdl.results(output: %output)
    irdl.attributes {
      "decomposition" = %decomposition,
      "output_split_sizes" = %output_split_sizes,
      "input_split_sizes" = %input_split_sizes,
      "group_name" = %group_name
    }
  }

  // A symbolic size (`128*s0`, over the graph's size symbols) while a graph with symbolic
  // sizes is lowered: the lowering replaces each with its value, computed from the kernel's
  // arguments, before the module is written, so no dump holds one.
  irdl.operation @size {
    %size = irdl.base "#builtin.string"
    %index = irdl.is index
    irdl.results(value: %index)
    irdl.attributes {"size" = %size}
  }
}
