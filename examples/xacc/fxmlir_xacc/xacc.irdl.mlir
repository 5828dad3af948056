// A vendor's dialect in IRDL, as a plugin would ship it: one elementwise op on tensors.
irdl.dialect @xacc {
  irdl.operation @tanh {
    %tensor = irdl.base "!builtin.tensor"
    irdl.operands(input: %tensor)
    irdl.results(output: %tensor)
  }
}
