irdl.dialect @broken {
  irdl.operation @op {
    irdl.operands(input: %undefined)
  }
}
