// Each integration-test crate includes this module and uses only some of its helpers.
#![allow(dead_code)]

//! Helpers shared by the integration tests: small graph documents built in code.

use fxmlir::graph::{Arg, DType, Graph, Input, Node, TensorMeta, ValueRef};

pub fn meta(shape: &[i64], dtype: DType) -> TensorMeta {
    TensorMeta::contiguous(shape.to_vec(), dtype)
}

pub fn strided(shape: &[i64], strides: &[i64], dtype: DType) -> TensorMeta {
    TensorMeta {
        shape: shape.to_vec(),
        strides: strides.to_vec(),
        dtype,
        device: "cpu".into(),
    }
}

pub fn input(name: &str, meta: TensorMeta) -> Input {
    Input {
        name: name.into(),
        meta,
    }
}

pub fn r(node: &str) -> Arg {
    Arg::Ref(ValueRef {
        node: node.into(),
        index: 0,
    })
}

pub fn node(name: &str, target: &str, args: Vec<Arg>, outputs: Vec<TensorMeta>) -> Node {
    Node {
        name: name.into(),
        target: target.into(),
        args,
        arg_names: vec![],
        outputs,
        source: None,
        lowering: None,
    }
}

pub fn graph(name: &str, inputs: Vec<Input>, nodes: Vec<Node>, outputs: &[&str]) -> Graph {
    Graph {
        format: fxmlir::graph::FORMAT.into(),
        version: fxmlir::graph::VERSION,
        name: name.into(),
        inputs,
        constants: vec![],
        nodes,
        outputs: outputs
            .iter()
            .map(|n| ValueRef {
                node: (*n).into(),
                index: 0,
            })
            .collect(),
        symbols: vec![],
    }
}

/// `target` applied to one f32 input `x` of `shape`; the node records `out` as its result shape.
pub fn unary(name: &str, target: &str, shape: &[i64], out: &[i64]) -> Graph {
    let op = target.split('.').nth(1).unwrap_or("op");
    graph(
        name,
        vec![input("x", meta(shape, DType::Float32))],
        vec![node(
            op,
            target,
            vec![r("x")],
            vec![meta(out, DType::Float32)],
        )],
        &[op],
    )
}

/// `x + alpha * y` with x `[2, 3]` and y `[3]` broadcast, f32.
pub fn broadcast_add(name: &str, alpha: i64) -> Graph {
    graph(
        name,
        vec![
            input("x", meta(&[2, 3], DType::Float32)),
            input("y", meta(&[3], DType::Float32)),
        ],
        vec![node(
            "add",
            "aten.add.Tensor",
            vec![r("x"), r("y"), Arg::Int(alpha)],
            vec![meta(&[2, 3], DType::Float32)],
        )],
        &["add"],
    )
}
