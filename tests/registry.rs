//! The lowering registry: built without duplicates, and covering the ops the spine promises.

use std::collections::HashSet;

const REQUIRED: &[&str] = &[
    "aten.neg.default",
    "aten.abs.default",
    "aten.exp.default",
    "aten.log.default",
    "aten.sqrt.default",
    "aten.rsqrt.default",
    "aten.sin.default",
    "aten.cos.default",
    "aten.tanh.default",
    "aten.sigmoid.default",
    "aten.relu.default",
    "aten.gelu.default",
    "aten.erf.default",
    "aten.reciprocal.default",
    "aten.add.Tensor",
    "aten.sub.Tensor",
    "aten.mul.Tensor",
    "aten.div.Tensor",
    "aten.div.Tensor_mode",
    "aten.pow.Tensor_Tensor",
    "aten.pow.Tensor_Scalar",
    "aten.maximum.default",
    "aten.minimum.default",
    "aten.eq.Tensor",
    "aten.lt.Scalar",
    "aten.where.self",
    "aten._to_copy.default",
    "aten.full.default",
    "aten.full_like.default",
    "aten.scalar_tensor.default",
    "aten.mm.default",
    "aten.bmm.default",
    "aten.addmm.default",
    "aten.sum.dim_IntList",
    "aten.mean.dim",
    "aten.amax.default",
    "aten.amin.default",
    "aten.var.correction",
    "aten.var_mean.correction",
    "aten.any.dim",
    "aten.argmax.default",
    "aten._softmax.default",
    "aten._log_softmax.default",
    "aten.native_layer_norm.default",
    "aten.view.default",
    "aten._unsafe_view.default",
    "aten.permute.default",
    "aten.transpose.int",
    "aten.expand.default",
    "aten.unsqueeze.default",
    "aten.squeeze.dim",
    "aten.slice.Tensor",
    "aten.select.int",
    "aten.cat.default",
    "aten.clone.default",
    "aten.alias.default",
    "aten.split_with_sizes.default",
];

#[test]
fn registry_builds_and_covers_the_spine() {
    let ops = fxmlir::supported_ops().expect("registry builds without duplicate rows");
    let names: HashSet<&str> = ops.iter().map(|(op, _)| *op).collect();
    assert_eq!(names.len(), ops.len());
    let missing: Vec<&&str> = REQUIRED.iter().filter(|op| !names.contains(**op)).collect();
    assert!(missing.is_empty(), "missing lowerings: {missing:?}");
    for (op, family) in &ops {
        // ATen and prims overloads, PyTorch's functional collectives, fxmlir's own ops
        // (`fxmlir.mm_pairs`) and custom ops of the libraries models come from
        // (`transformers.grouped_mm_fallback`).
        let namespaced = [
            "aten.",
            "prims.",
            "_c10d_functional.",
            "fxmlir.",
            "transformers.",
        ];
        assert!(namespaced.iter().any(|n| op.starts_with(n)), "{op}");
        assert!(!family.is_empty());
    }
}
