// A vendor's rewrite of fxmlir's bf16 pair product into a call of its own kernel, placed
// before fxmlir's `expand` stage.
module {
  pdl.pattern @mm_pairs_to_kernel : benefit(1) {
    %left = pdl.operand
    %pairs = pdl.operand
    %type = pdl.type
    %op = pdl.operation "fxmlir.mm_pairs"(%left, %pairs : !pdl.value, !pdl.value) -> (%type : !pdl.type)
    pdl.rewrite %op {
      %callee = pdl.attribute = @vendor_mm_pairs
      %call = pdl.operation "func.call"(%left, %pairs : !pdl.value, !pdl.value) {"callee" = %callee} -> (%type : !pdl.type)
      pdl.replace %op with %call
    }
  }
}
