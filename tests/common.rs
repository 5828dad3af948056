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
    }
}
