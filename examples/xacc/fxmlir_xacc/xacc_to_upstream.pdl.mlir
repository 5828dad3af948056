// The xacc plugin's stage: lowers its dialect to upstream ops (xacc.tanh is math.tanh on the
// same tensor).
module {
  pdl.pattern @xacc_tanh : benefit(1) {
    %x = pdl.operand
    %t = pdl.type
    %op = pdl.operation "xacc.tanh"(%x : !pdl.value) -> (%t : !pdl.type)
    pdl.rewrite %op {
      %tanh = pdl.operation "math.tanh"(%x : !pdl.value) -> (%t : !pdl.type)
      pdl.replace %op with %tanh
    }
  }
}
