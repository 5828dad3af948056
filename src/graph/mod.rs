//! The interchange model: the JSON a Python frontend writes for one FX graph (see
//! `docs/interchange.md`), parsed and validated into Rust types before anything is lowered.

pub mod dims;
mod dtype;
mod validate;

pub use dtype::{DType, Operand, ScalarKind, result_type};

use crate::error::{Error, NodeSite, Result};
use serde::{Deserialize, Serialize};

/// The format tag and the version this build reads and writes.
pub const FORMAT: &str = "fxmlir.graph";
pub const VERSION: u32 = 1;

/// Shape, strides and dtype of one tensor, as FakeTensor propagation recorded them. A size
/// may be symbolic (a marker, see [`dims`]) in a graph with [`Graph::symbols`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorMeta {
    #[serde(with = "dims::list")]
    pub shape: Vec<i64>,
    #[serde(with = "dims::list")]
    pub strides: Vec<i64>,
    pub dtype: DType,
    #[serde(default = "default_device")]
    pub device: String,
}

fn default_device() -> String {
    "cpu".to_string()
}

impl TensorMeta {
    pub fn contiguous(shape: Vec<i64>, dtype: DType) -> Self {
        let strides = contiguous_strides(&shape);
        TensorMeta {
            shape,
            strides,
            dtype,
            device: default_device(),
        }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self) -> i64 {
        self.shape.iter().product()
    }

    /// Row-major contiguous, ignoring the strides of size-1 dimensions (they are never used).
    pub fn is_contiguous(&self) -> bool {
        let expected = contiguous_strides(&self.shape);
        self.shape
            .iter()
            .zip(self.strides.iter().zip(&expected))
            .all(|(&size, (&s, &e))| size <= 1 || s == e)
    }
}

/// Row-major strides of `shape`; symbolic sizes give symbolic strides (see [`dims`]).
pub fn contiguous_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = if dims::is_symbolic(shape[i + 1]) || dims::is_symbolic(strides[i + 1]) {
            // A symbolic size is at least 2; a fixed one counts as at least 1, as in PyTorch.
            let size = match dims::is_symbolic(shape[i + 1]) {
                true => shape[i + 1],
                false => shape[i + 1].max(1),
            };
            dims::product(&[strides[i + 1], size]).unwrap_or(dims::MAX_SIZE)
        } else {
            strides[i + 1] * shape[i + 1].max(1)
        };
    }
    strides
}

/// A floating-point literal; JSON has no infinities or NaN, so those travel as strings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FloatLit {
    Number(f64),
    Special(SpecialFloat),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpecialFloat {
    #[serde(rename = "inf")]
    Inf,
    #[serde(rename = "-inf")]
    NegInf,
    #[serde(rename = "nan")]
    Nan,
}

impl FloatLit {
    pub fn value(self) -> f64 {
        match self {
            FloatLit::Number(v) => v,
            FloatLit::Special(SpecialFloat::Inf) => f64::INFINITY,
            FloatLit::Special(SpecialFloat::NegInf) => f64::NEG_INFINITY,
            FloatLit::Special(SpecialFloat::Nan) => f64::NAN,
        }
    }
}

/// A reference to output `index` of a node, input or constant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ValueRef {
    pub node: String,
    #[serde(default)]
    pub index: usize,
}

/// One argument of a node, in schema order with defaults filled in by the frontend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arg {
    Ref(ValueRef),
    /// An integer, or a symbolic size (a marker, see [`dims`]).
    Int(#[serde(with = "dims::one")] i64),
    Float(FloatLit),
    /// A float computed from sizes, `num / den` (each an integer or a symbolic size): a
    /// batch norm's `1 / (n*h*w)` in a graph for every size.
    Ratio(#[serde(with = "dims::list")] Vec<i64>),
    Bool(bool),
    None,
    List(Vec<Arg>),
    Dtype(DType),
    Str(String),
    Device(String),
    Layout(String),
    MemoryFormat(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    pub file: String,
    pub line: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Input {
    pub name: String,
    pub meta: TensorMeta,
}

/// A tensor baked into the graph (an FX `get_attr`), little-endian bytes in base64.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Constant {
    pub name: String,
    pub meta: TensorMeta,
    pub data: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    /// ATen overload, `aten.add.Tensor`.
    pub target: String,
    pub args: Vec<Arg>,
    /// Schema argument names, parallel to `args` (for messages and docs).
    #[serde(default)]
    pub arg_names: Vec<String>,
    pub outputs: Vec<TensorMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// A lowering given with the node, in place of the registry's row for its op: a
    /// registered Python lowering's MLIR (see `fxmlir.lowerings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lowering: Option<InlineLowering>,
}

/// A node's lowering given as MLIR text: one `func.func` taking the node's tensor arguments
/// (in order, with the types their metadata gives) and returning its outputs, which the
/// lowering makes the decomposition of the node's `fxmlir.external` op. `origin` (who
/// registered it) names it in errors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InlineLowering {
    pub origin: String,
    pub mlir: String,
}

impl Node {
    pub fn site(&self) -> NodeSite {
        NodeSite {
            node: self.name.clone(),
            op: self.target.clone(),
            source: self
                .source
                .as_ref()
                .map(|s| format!("{}:{}", s.file, s.line)),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    pub format: String,
    pub version: u32,
    pub name: String,
    pub inputs: Vec<Input>,
    #[serde(default)]
    pub constants: Vec<Constant>,
    pub nodes: Vec<Node>,
    pub outputs: Vec<ValueRef>,
    /// The size symbols of a graph compiled for every size in their ranges (empty: every
    /// size is fixed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub symbols: Vec<Symbol>,
}

/// A size symbol (Dynamo's `s0`) and the values its guards accept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Symbol {
    pub name: String,
    pub min: i64,
    pub max: i64,
}

impl Graph {
    /// Parses and validates an interchange document.
    pub fn from_json(text: &str) -> Result<Graph> {
        let graph: Graph = serde_json::from_str(text)?;
        graph.validate()?;
        Ok(graph)
    }

    pub fn from_file(path: &std::path::Path) -> Result<Graph> {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::io(path.display().to_string(), e))?;
        Graph::from_json(&text)
    }

    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// Whether a node or the graph's result reads `r`.
    pub fn is_used(&self, r: &ValueRef) -> bool {
        fn reads(arg: &Arg, r: &ValueRef) -> bool {
            match arg {
                Arg::Ref(v) => v == r,
                Arg::List(items) => items.iter().any(|a| reads(a, r)),
                _ => false,
            }
        }
        self.outputs.contains(r)
            || self
                .nodes
                .iter()
                .any(|n| n.args.iter().any(|a| reads(a, r)))
    }

    /// The metadata of any value in the graph.
    pub fn meta(&self, r: &ValueRef) -> Option<&TensorMeta> {
        if let Some(input) = self.inputs.iter().find(|i| i.name == r.node) {
            return (r.index == 0).then_some(&input.meta);
        }
        if let Some(constant) = self.constants.iter().find(|c| c.name == r.node) {
            return (r.index == 0).then_some(&constant.meta);
        }
        self.nodes
            .iter()
            .find(|n| n.name == r.node)
            .and_then(|n| n.outputs.get(r.index))
    }
}
