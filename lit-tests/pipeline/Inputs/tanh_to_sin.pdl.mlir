// PDL patterns for lit-tests/pipeline/stages.mlir: every math.tanh becomes math.sin.
module {
  pdl.pattern @tanh_to_sin : benefit(1) {
    %x = pdl.operand
    %t = pdl.type
    %op = pdl.operation "math.tanh"(%x : !pdl.value) -> (%t : !pdl.type)
    pdl.rewrite %op {
      %sin = pdl.operation "math.sin"(%x : !pdl.value) -> (%t : !pdl.type)
      pdl.replace %op with %sin
    }
  }
}
