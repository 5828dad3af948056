func.func @pairs(%a: tensor<4x8xbf16>, %p: tensor<4x16x2xbf16>) -> tensor<4x16xf32> {
  %0 = "fxmlir.mm_pairs"(%a, %p) {decomposition = @gone} : (tensor<4x8xbf16>, tensor<4x16x2xbf16>) -> tensor<4x16xf32> loc("mm_pairs (n1)")
  return %0 : tensor<4x16xf32>
}
