//! Lowering from the interchange graph to MLIR on tensors. One [`Registry`] maps each ATen
//! overload to its lowering; each op family registers its rows from its own file.

mod attention;
mod collectives;
mod conv;
mod creation;
mod data_movement;
mod elements;
mod elementwise;
pub mod emit;
mod flash;
mod indexing;
mod layout;
mod linear;
mod loops;
mod normalization;
mod pooling;
mod products;
mod reduction;
mod resize;
mod samples;
mod sampling;
mod scan;
mod sizes;
mod softmax;
mod whole;
mod window;

use crate::error::{Check, Error, NodeSite, Result};
use crate::graph::{Arg, DType, Graph, Node, Operand as DtypeOperand, TensorMeta, ValueRef};
use crate::target::Target;
pub use conv::{shifted_convolution, tap_major_permutations};
pub use emit::{Emit, Iter, Scalar, fail, lowering_error};
use melior::{
    Context,
    dialect::func,
    ir::{
        Attribute, Block, BlockLike, Identifier, Location, Module, Region, RegionLike, Type, Value,
        ValueLike,
        attribute::{FlatSymbolRefAttribute, StringAttribute, TypeAttribute},
        operation::{Operation, OperationLike, OperationMutLike},
        r#type::FunctionType,
    },
};
pub use products::widened;
use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

/// The signature every lowering has.
pub type LowerFn =
    dyn for<'c, 'a> Fn(&mut LowerCtx<'c, 'a>, &Node) -> Result<Vec<Value<'c, 'a>>> + Send + Sync;

pub struct Lowering {
    pub family: &'static str,
    pub lower: Box<LowerFn>,
    /// The op of fxmlir's dialect the node becomes, its lowering being that op's
    /// decomposition; `None` when the lowering's ops go straight into the graph function.
    pub whole: Option<Whole>,
    /// What the lowering checks at run time (indices, divisors), reporting a failure through
    /// the status buffer ([`LowerCtx::report`]), for the nodes it applies to.
    pub checked: Option<Checked>,
    /// Whether the kernel calls back into its host to run the node ([`LowerCtx::call_host`]):
    /// a collective runs in PyTorch's c10d.
    pub calls_host: bool,
    /// Whether it lowers nodes with symbolic sizes (see [`crate::graph::dims`]): it only
    /// carries shapes from the graph's metadata into the IR, never computes with them.
    pub dynamic: bool,
    /// Whether it computes every sample of its batch from that sample alone, and so lowers
    /// nodes whose only symbolic size is the batch one sample at a time (see `samples`), at
    /// fixed sizes and with their schedules, even when it is also `dynamic` (its own lowering
    /// then takes nodes with other symbolic sizes); never a row lowered `whole`.
    pub per_sample: bool,
}

/// A row's run-time check, and the nodes it applies to (say, integer divisions only).
#[derive(Clone, Copy)]
pub struct Checked {
    pub check: Check,
    pub applies: fn(&Node) -> bool,
}

pub use whole::Whole;

/// Rows that take symbolic sizes in families whose other rows do not.
const DYNAMIC_OPS: [&str; 58] = [
    "aten._softmax.default",
    "aten._log_softmax.default",
    "aten.native_layer_norm.default",
    "aten._native_batch_norm_legit_no_training.default",
    "aten._native_batch_norm_legit.default",
    "aten._native_batch_norm_legit.no_stats",
    "aten._native_batch_norm_legit_functional.default",
    "aten.view.default",
    "aten._unsafe_view.default",
    "aten.reshape.default",
    "aten.unsqueeze.default",
    "aten.squeeze.default",
    "aten.squeeze.dim",
    "aten.squeeze.dims",
    "aten.clone.default",
    "aten.alias.default",
    "aten.detach.default",
    "aten.as_strided.default",
    "aten.permute.default",
    "aten.transpose.int",
    "aten.t.default",
    "aten.expand.default",
    "aten.flatten.using_ints",
    "aten.mm.default",
    "aten.bmm.default",
    "aten.addmm.default",
    "fxmlir.mm_pairs.default",
    "aten.slice.Tensor",
    "aten.select.int",
    "aten.embedding.default",
    "aten.gather.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
    "aten.cat.default",
    "aten.split.Tensor",
    "aten.split_with_sizes.default",
    "aten.copy.default",
    "aten.index_select.default",
    "aten.native_dropout.default",
    "aten.scatter.src",
    "aten.scatter.value",
    "aten.scatter_add.default",
    "aten.scatter_reduce.two",
    "aten.index_put.default",
    "aten.select_scatter.default",
    "aten.slice_scatter.default",
    "aten.flip.default",
    "aten.native_group_norm.default",
    "aten.repeat.default",
    "aten.convolution.default",
    "aten.index.Tensor",
    "aten.constant_pad_nd.default",
    "aten.reflection_pad1d.default",
    "aten.reflection_pad2d.default",
    "aten.reflection_pad3d.default",
    "aten.replication_pad2d.default",
    "aten.replication_pad3d.default",
    "aten.grid_sampler_2d.default",
];

/// Rows that take symbolic integer arguments: sizes, which they read as polynomials (a slice's
/// end, a split's sizes, a group norm's batch and image size, a transposed convolution's
/// output padding, a padding's amounts), compare with the input's (an
/// `as_strided` that restrides unit dimensions) or never read (a view's or an expand's sizes:
/// they take the result's shape from the graph's metadata). So do the rows of
/// `SYMBOLIC_ARGUMENT_FAMILIES`.
const SYMBOLIC_ARGUMENTS: [&str; 11] = [
    "aten.as_strided.default",
    "aten.view.default",
    "aten._unsafe_view.default",
    "aten.reshape.default",
    "aten.expand.default",
    "aten.slice.Tensor",
    "aten.split_with_sizes.default",
    "aten.split.Tensor",
    "aten.native_group_norm.default",
    "aten.convolution.default",
    "aten.constant_pad_nd.default",
];

/// Families whose rows take symbolic numbers: a creation's sizes (never read) and values, an
/// elementwise op's scalars (`arange(n) + past`), read with [`LowerCtx::operand`] or
/// [`LowerCtx::scalar_value`] (a row that reads one with [`LowerCtx::scalar`] fails, and its
/// graph compiles per size).
const SYMBOLIC_ARGUMENT_FAMILIES: [&str; 2] = ["creation", "elementwise"];

/// A family file's registration function.
type Register = fn(&mut Registry);

/// ATen overload → lowering. Building it fails on a duplicate key.
#[derive(Default)]
pub struct Registry {
    rows: BTreeMap<&'static str, Lowering>,
    duplicates: Vec<&'static str>,
    family: &'static str,
    /// Whether the rows being registered take symbolic sizes (their family's).
    dynamic: bool,
}

impl Registry {
    pub fn add<F>(&mut self, op: &'static str, lower: F)
    where
        F: for<'c, 'a> Fn(&mut LowerCtx<'c, 'a>, &Node) -> Result<Vec<Value<'c, 'a>>>
            + Send
            + Sync
            + 'static,
    {
        self.insert(op, Box::new(lower), None, None, false);
    }

    /// A row whose lowering checks runtime values ([`LowerCtx::report`]) of the nodes
    /// `checked` applies to; a failure raises what PyTorch raises for the op.
    pub fn add_checked<F>(&mut self, op: &'static str, checked: Checked, lower: F)
    where
        F: for<'c, 'a> Fn(&mut LowerCtx<'c, 'a>, &Node) -> Result<Vec<Value<'c, 'a>>>
            + Send
            + Sync
            + 'static,
    {
        self.insert(op, Box::new(lower), None, Some(checked), false);
    }

    /// A row whose node becomes `whole`'s op of fxmlir's dialect, `lower` writing its
    /// decomposition (see [`Whole`]).
    pub fn add_whole<F>(&mut self, op: &'static str, whole: Whole, lower: F)
    where
        F: for<'c, 'a> Fn(&mut LowerCtx<'c, 'a>, &Node) -> Result<Vec<Value<'c, 'a>>>
            + Send
            + Sync
            + 'static,
    {
        self.insert(op, Box::new(lower), Some(whole), None, false);
    }

    /// A row lowered whole (see [`Registry::add_whole`]) whose decomposition calls back into
    /// the kernel's host ([`LowerCtx::call_host`]).
    pub fn add_host<F>(&mut self, op: &'static str, whole: Whole, lower: F)
    where
        F: for<'c, 'a> Fn(&mut LowerCtx<'c, 'a>, &Node) -> Result<Vec<Value<'c, 'a>>>
            + Send
            + Sync
            + 'static,
    {
        self.insert(op, Box::new(lower), Some(whole), None, true);
    }

    fn insert(
        &mut self,
        op: &'static str,
        lower: Box<LowerFn>,
        whole: Option<Whole>,
        checked: Option<Checked>,
        calls_host: bool,
    ) {
        let dynamic = self.dynamic || DYNAMIC_OPS.contains(&op);
        let per_sample = samples::PER_SAMPLE_OPS.contains(&op) && whole.is_none();
        let row = Lowering {
            family: self.family,
            lower,
            whole,
            checked,
            calls_host,
            dynamic,
            per_sample,
        };
        if self.rows.insert(op, row).is_some() {
            self.duplicates.push(op);
        }
    }

    fn build() -> Result<Registry> {
        let mut r = Registry::default();
        // The families whose rows take symbolic sizes.
        const DYNAMIC: [&str; 5] = ["elementwise", "reduction", "creation", "scan", "pooling"];
        let families: [(&'static str, Register); 14] = [
            ("elementwise", elementwise::register),
            ("creation", creation::register),
            ("linear", linear::register),
            ("reduction", reduction::register),
            ("data_movement", data_movement::register),
            ("indexing", indexing::register),
            ("scan", scan::register),
            ("normalization", normalization::register),
            ("attention", attention::register),
            ("conv", conv::register),
            ("pooling", pooling::register),
            ("resize", resize::register),
            ("sampling", sampling::register),
            ("collectives", collectives::register),
        ];
        for (family, register) in families {
            r.family = family;
            r.dynamic = DYNAMIC.contains(&family);
            register(&mut r);
        }
        if !r.duplicates.is_empty() {
            return Err(Error::InvalidGraph(format!(
                "lowering registry has duplicate rows: {:?}",
                r.duplicates
            )));
        }
        Ok(r)
    }

    /// The process-wide registry.
    pub fn global() -> Result<&'static Registry> {
        static REGISTRY: OnceLock<std::result::Result<Registry, String>> = OnceLock::new();
        REGISTRY
            .get_or_init(|| Registry::build().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| Error::InvalidGraph(e.clone()))
    }

    pub fn get(&self, op: &str) -> Option<&Lowering> {
        self.rows.get(op)
    }

    /// Every supported overload with its family, sorted.
    /// The ops whose rows take symbolic sizes.
    pub fn dynamic_ops(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.rows
            .iter()
            .filter(|(_, l)| l.dynamic)
            .map(|(op, _)| *op)
    }

    /// The ops whose rows lower a node with a symbolic batch one sample at a time.
    pub fn batch_ops(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.rows
            .iter()
            .filter(|(_, l)| l.per_sample)
            .map(|(op, _)| *op)
    }

    pub fn ops(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        self.rows.iter().map(|(op, l)| (*op, l.family))
    }
}

/// A tensor value with the static shape and dtype lowering needs.
#[derive(Clone)]
pub struct Tensor<'c, 'a> {
    pub value: Value<'c, 'a>,
    pub shape: Vec<i64>,
    pub dtype: DType,
}

impl Tensor<'_, '_> {
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

/// An elementwise operand: a tensor (broadcast to the result) or a Python scalar.
#[derive(Clone)]
pub enum Operand<'c, 'a> {
    Tensor(Tensor<'c, 'a>),
    Scalar(Scalar),
}

impl Operand<'_, '_> {
    pub fn promotion(&self) -> DtypeOperand {
        match self {
            Operand::Tensor(t) => DtypeOperand::Tensor {
                dtype: t.dtype,
                rank: t.rank(),
            },
            Operand::Scalar(s) => DtypeOperand::Scalar(s.kind()),
        }
    }
}

/// State while lowering one graph: the function body, the values defined so far and the
/// location of the node being lowered.
pub struct LowerCtx<'c, 'a> {
    pub e: Emit<'c, 'a>,
    /// The CPU the module is for: lowerings that use its instructions (bf16 dot products) or
    /// widen for it read it here, never from the host.
    pub target: &'a Target,
    /// `target` with one thread: the target of the nodes lowered per sample (see `samples`),
    /// whose samples the threads share.
    one_thread: &'a Target,
    graph: &'a Graph,
    values: HashMap<ValueRef, Value<'c, 'a>>,
    /// The shapes of the values a node lowered per sample reads, one sample's (see `samples`),
    /// in place of the graph's.
    shapes: HashMap<ValueRef, Vec<i64>>,
    node_outputs: Vec<TensorMeta>,
    /// The decomposition functions of the nodes lowered whole so far.
    decompositions: Vec<whole::Decomposition<'c>>,
    /// The loops over a batch written so far, whose bodies `samples::attach` gives them.
    loops: Vec<mlir_sys::MlirOperation>,
    /// The status buffer (`memref<1xi64>`, the function's last argument) when the graph has
    /// checked nodes (see [`checked_nodes`]), and the code of the node being lowered.
    status: Option<Value<'c, 'a>>,
    check_code: i64,
    /// The host call number of the node being lowered, when its row calls the host (see
    /// [`host_calls`]).
    host_slot: Option<i64>,
}

impl<'c, 'a> LowerCtx<'c, 'a> {
    fn meta_of(&self, r: &ValueRef) -> Result<&'a TensorMeta> {
        self.graph
            .meta(r)
            .ok_or_else(|| Error::InvalidGraph(format!("no metadata for `{}`", r.node)))
    }

    /// Whether anything reads output `index` of `node`.
    pub fn used(&self, node: &Node, index: usize) -> bool {
        self.graph.is_used(&ValueRef {
            node: node.name.clone(),
            index,
        })
    }

    /// The metadata of the current node's outputs.
    pub fn out(&self, index: usize) -> Result<&TensorMeta> {
        self.node_outputs
            .get(index)
            .ok_or_else(|| lowering_error(format!("the node has no output {index}")))
    }

    pub fn arg<'n>(&self, node: &'n Node, index: usize) -> Result<&'n Arg> {
        node.args.get(index).ok_or_else(|| {
            lowering_error(format!(
                "expected at least {} arguments, got {}",
                index + 1,
                node.args.len()
            ))
        })
    }

    fn arg_name(node: &Node, index: usize) -> String {
        node.arg_names
            .get(index)
            .map_or(format!("argument {index}"), |n| format!("argument `{n}`"))
    }

    fn tensor_of(&self, arg: &Arg) -> Result<Option<Tensor<'c, 'a>>> {
        let Arg::Ref(r) = arg else { return Ok(None) };
        let meta = self.meta_of(r)?;
        let value = self.value(r)?;
        Ok(Some(Tensor {
            value,
            shape: self.shapes.get(r).unwrap_or(&meta.shape).clone(),
            dtype: meta.dtype,
        }))
    }

    /// Records the outcome of a runtime check of the current node: where `failed` (an `i1`)
    /// holds, the status buffer gets the node's code, unless an earlier check put its own
    /// there. A graph compiled without checks (for an executor) records nothing; its kernel
    /// stays in bounds all the same.
    pub fn report(&self, failed: Value<'c, 'a>) -> Result<()> {
        let (Some(status), true) = (self.status, self.check_code > 0) else {
            return Ok(());
        };
        let e = &self.e;
        let zero = e.index(0)?;
        let current = e.op1(
            "memref.load",
            &[status, zero],
            e.elem_type(DType::Int64)?,
            &[],
        )?;
        let code = e.constant(Scalar::Int(self.check_code), DType::Int64)?;
        let none = e.constant(Scalar::Int(0), DType::Int64)?;
        let first = e.cmpi("eq", current, none)?;
        let mine = e.select(failed, code, current)?;
        let next = e.select(first, mine, current)?;
        e.op("memref.store", &[next, status, zero], &[], &[])?;
        Ok(())
    }

    /// Reports (see [`LowerCtx::report`]) whether `failed` holds for an element of `t`: one
    /// reduction over `t`, outside the op's own loops.
    pub fn report_any<F>(&self, t: &Tensor<'c, 'a>, failed: F) -> Result<()>
    where
        F: for<'b> Fn(&Emit<'c, 'b>, Value<'c, 'b>) -> Result<Value<'c, 'b>>,
    {
        if self.status.is_none() || self.check_code == 0 {
            return Ok(());
        }
        let rank = t.rank();
        let init = self.e.splat(&[], DType::Bool, Scalar::Bool(false))?;
        let results = self.e.generic(
            &[(t.value, emit::identity_map(rank))],
            &[(init, emit::affine_map(rank, &[]))],
            &vec![Iter::Reduction; rank],
            |b, args| {
                let (x, seen) = (args[0], args[1]);
                let bad = failed(b, x)?;
                Ok(vec![b.same("arith.ori", &[seen, bad])?])
            },
        )?;
        let any = self.e.op1(
            "tensor.extract",
            &[results[0]],
            self.e.elem_type(DType::Bool)?,
            &[],
        )?;
        self.report(any)
    }

    /// Has the kernel's host run the current node (its row is [`Registry::add_host`]'s):
    /// appends `call @fxmlir_host_call(number, source, target)` with the aligned addresses of
    /// the buffers `source` and `target` (identity-layout memrefs).
    pub fn call_host(&self, source: Value<'c, 'a>, target: Value<'c, 'a>) -> Result<()> {
        let Some(slot) = self.host_slot else {
            return fail("the node's row does not call the host".to_string());
        };
        let e = &self.e;
        let i64_type = e.elem_type(DType::Int64)?;
        let address = |buffer: Value<'c, 'a>| -> Result<Value<'c, 'a>> {
            let index = e.op1(
                "memref.extract_aligned_pointer_as_index",
                &[buffer],
                e.ty("index")?,
                &[],
            )?;
            e.op1("arith.index_cast", &[index], i64_type, &[])
        };
        let operands = [
            e.constant(Scalar::Int(slot), DType::Int64)?,
            address(source)?,
            address(target)?,
        ];
        e.op(
            "func.call",
            &operands,
            &[],
            &[(
                "callee",
                FlatSymbolRefAttribute::new(e.context, HOST_CALL).into(),
            )],
        )?;
        Ok(())
    }

    /// The node that computes argument `index` of `node`, when a node of the graph does (not
    /// an input or a constant).
    pub fn producer(&self, node: &Node, index: usize) -> Option<&'a Node> {
        let Some(Arg::Ref(r)) = node.args.get(index) else {
            return None;
        };
        self.graph.nodes.iter().find(|n| n.name == r.node)
    }

    /// The value `r` names.
    fn value(&self, r: &ValueRef) -> Result<Value<'c, 'a>> {
        self.values.get(r).copied().ok_or_else(|| {
            Error::InvalidGraph(format!("`{}` is used before it is defined", r.node))
        })
    }

    pub fn tensor(&self, node: &Node, index: usize) -> Result<Tensor<'c, 'a>> {
        self.tensor_of(self.arg(node, index)?)?.ok_or_else(|| {
            lowering_error(format!("{} must be a tensor", Self::arg_name(node, index)))
        })
    }

    pub fn opt_tensor(&self, node: &Node, index: usize) -> Result<Option<Tensor<'c, 'a>>> {
        match node.args.get(index) {
            None | Some(Arg::None) => Ok(None),
            Some(arg) => self.tensor_of(arg)?.map(Some).ok_or_else(|| {
                lowering_error(format!(
                    "{} must be a tensor or None",
                    Self::arg_name(node, index)
                ))
            }),
        }
    }

    pub fn tensor_list(&self, node: &Node, index: usize) -> Result<Vec<Tensor<'c, 'a>>> {
        match self.arg(node, index)? {
            Arg::List(items) => items
                .iter()
                .map(|a| {
                    self.tensor_of(a)?.ok_or_else(|| {
                        lowering_error(format!("{} must hold tensors", Self::arg_name(node, index)))
                    })
                })
                .collect(),
            _ => fail(format!(
                "{} must be a list of tensors",
                Self::arg_name(node, index)
            )),
        }
    }

    /// A tensor or a Python scalar; a symbolic size (see [`crate::graph::dims`]) is an `int64`
    /// 0-d tensor computed from the kernel's arguments, which promotes as the scalar would.
    pub fn operand(&self, node: &Node, index: usize) -> Result<Operand<'c, 'a>> {
        let arg = self.arg(node, index)?;
        if let Some(t) = self.tensor_of(arg)? {
            return Ok(Operand::Tensor(t));
        }
        if let Arg::Int(size) = arg
            && crate::graph::dims::is_symbolic(*size)
        {
            let value = self.scalar_value(node, index, DType::Int64)?;
            return Ok(Operand::Tensor(self.scalar_tensor(value, DType::Int64)?));
        }
        if let Arg::Ratio(_) = arg {
            // In f64, as Python computed it; the op converts it as it would a Python float.
            let value = self.scalar_value(node, index, DType::Float64)?;
            return Ok(Operand::Tensor(self.scalar_tensor(value, DType::Float64)?));
        }
        scalar_of(arg).map(Operand::Scalar).ok_or_else(|| {
            lowering_error(format!(
                "{} must be a tensor or a number",
                Self::arg_name(node, index)
            ))
        })
    }

    /// A 0-d tensor holding `value` (a scalar of `dtype`).
    pub fn scalar_tensor(&self, value: Value<'c, 'a>, dtype: DType) -> Result<Tensor<'c, 'a>> {
        let ty = self.e.tensor_type(&[], dtype)?;
        Ok(Tensor {
            value: self.e.op1("tensor.from_elements", &[value], ty, &[])?,
            shape: vec![],
            dtype,
        })
    }

    /// A number argument; a symbolic size is an error (rows that take one read it with
    /// [`LowerCtx::operand`] or [`LowerCtx::scalar_value`]).
    pub fn scalar(&self, node: &Node, index: usize) -> Result<Scalar> {
        let arg = self.arg(node, index)?;
        if let Arg::Int(size) = arg
            && crate::graph::dims::is_symbolic(*size)
        {
            return fail(format!(
                "{} is the symbolic size {}, where only a fixed number is supported (compile \
                 the graph for fixed sizes)",
                Self::arg_name(node, index),
                crate::graph::dims::poly_of(*size)
            ));
        }
        if let Arg::Ratio(parts) = arg {
            return fail(format!(
                "{} is a ratio of sizes ({}), where only a fixed number is supported (compile \
                 the graph for fixed sizes)",
                Self::arg_name(node, index),
                crate::graph::dims::shown(parts)
            ));
        }
        scalar_of(arg).ok_or_else(|| {
            lowering_error(format!("{} must be a number", Self::arg_name(node, index)))
        })
    }

    /// Scalar argument `index` as a value of `dtype`: a constant, or, for a symbolic size (a
    /// value Dynamo traced from sizes, say a cache's length), computed from the kernel's
    /// arguments (see [`Emit::size`]). A whole float becomes an integer first, so that
    /// `full(…, 1e10, dtype=int32)` wraps as PyTorch does instead of saturating.
    pub fn scalar_value(&self, node: &Node, index: usize, dtype: DType) -> Result<Value<'c, 'a>> {
        match self.arg(node, index)? {
            Arg::Int(size) if crate::graph::dims::is_symbolic(*size) => {
                self.e.size_value(*size, dtype)
            }
            Arg::Ratio(parts) => {
                let [num, den] = parts.as_slice() else {
                    return fail(format!(
                        "{} is a ratio of {} sizes, not 2",
                        Self::arg_name(node, index),
                        parts.len()
                    ));
                };
                let f64 = DType::Float64;
                let (num, den) = (self.e.size_value(*num, f64)?, self.e.size_value(*den, f64)?);
                let ratio = self.e.same("arith.divf", &[num, den])?;
                self.e.convert(ratio, f64, dtype)
            }
            _ => match (self.scalar(node, index)?, dtype.is_float()) {
                (Scalar::Float(f), false) if f.fract() == 0.0 => {
                    self.e.constant(Scalar::Int(f as i64), dtype)
                }
                (value, _) => self.e.constant(value, dtype),
            },
        }
    }

    pub fn int(&self, node: &Node, index: usize) -> Result<i64> {
        match self.arg(node, index)? {
            Arg::Int(i) => Ok(*i),
            Arg::Bool(b) => Ok(*b as i64),
            _ => fail(format!("{} must be an int", Self::arg_name(node, index))),
        }
    }

    pub fn opt_int(&self, node: &Node, index: usize) -> Result<Option<i64>> {
        match node.args.get(index) {
            None | Some(Arg::None) => Ok(None),
            Some(_) => self.int(node, index).map(Some),
        }
    }

    pub fn float(&self, node: &Node, index: usize) -> Result<f64> {
        Ok(self.scalar(node, index)?.as_f64())
    }

    pub fn bool(&self, node: &Node, index: usize) -> Result<bool> {
        match self.arg(node, index)? {
            Arg::Bool(b) => Ok(*b),
            Arg::Int(i) => Ok(*i != 0),
            _ => fail(format!("{} must be a bool", Self::arg_name(node, index))),
        }
    }

    pub fn str(&self, node: &Node, index: usize) -> Result<Option<String>> {
        match self.arg(node, index)? {
            Arg::Str(s) => Ok(Some(s.clone())),
            Arg::None => Ok(None),
            _ => fail(format!("{} must be a string", Self::arg_name(node, index))),
        }
    }

    pub fn int_list(&self, node: &Node, index: usize) -> Result<Vec<i64>> {
        match self.arg(node, index)? {
            Arg::List(items) => items
                .iter()
                .map(|a| match a {
                    Arg::Int(i) => Ok(*i),
                    _ => fail(format!("{} must hold ints", Self::arg_name(node, index))),
                })
                .collect(),
            Arg::Int(i) => Ok(vec![*i]),
            _ => fail(format!(
                "{} must be a list of ints",
                Self::arg_name(node, index)
            )),
        }
    }

    /// An optional list of ints; `None` and `[]` both come back as `None`.
    pub fn opt_int_list(&self, node: &Node, index: usize) -> Result<Option<Vec<i64>>> {
        match node.args.get(index) {
            None | Some(Arg::None) => Ok(None),
            Some(_) => {
                let list = self.int_list(node, index)?;
                Ok((!list.is_empty()).then_some(list))
            }
        }
    }

    // ---- structured helpers ------------------------------------------------------------

    /// Elementwise computation over broadcast operands. Operand `i` reaches `body` converted
    /// to `compute[i]`; `body` returns a value of dtype `produces`, which is converted to
    /// `out_dtype`. The result has shape `out_shape`.
    pub fn elementwise<F>(
        &self,
        operands: &[Operand<'c, 'a>],
        compute: &[DType],
        produces: DType,
        out_shape: &[i64],
        out_dtype: DType,
        body: F,
    ) -> Result<Value<'c, 'a>>
    where
        F: for<'b> FnOnce(&Emit<'c, 'b>, &[Value<'c, 'b>]) -> Result<Value<'c, 'b>>,
    {
        let rank = out_shape.len();
        let mut inputs = Vec::new();
        let mut slots = Vec::new();
        if compute.len() != operands.len() {
            return fail("internal: one compute dtype per operand is required");
        }
        for (operand, &compute) in operands.iter().zip(compute) {
            match operand {
                Operand::Tensor(t) => {
                    if t.rank() > rank {
                        return fail(format!(
                            "operand of shape {:?} does not broadcast to {out_shape:?}",
                            t.shape
                        ));
                    }
                    slots.push((Err((inputs.len(), t.dtype)), compute));
                    inputs.push((t.value, emit::broadcast_map(&t.shape, out_shape)));
                }
                Operand::Scalar(s) => slots.push((Ok(*s), compute)),
            }
        }
        let init = self.e.empty(out_shape, out_dtype)?;
        let outputs = [(init, emit::identity_map(rank))];
        let results =
            self.e
                .generic(&inputs, &outputs, &vec![Iter::Parallel; rank], |b, args| {
                    let mut values = Vec::new();
                    for (slot, compute) in &slots {
                        values.push(match slot {
                            Ok(s) => b.constant(*s, *compute)?,
                            Err((i, dtype)) => b.convert(args[*i], *dtype, *compute)?,
                        });
                    }
                    let result = body(b, &values)?;
                    Ok(vec![b.convert(result, produces, out_dtype)?])
                })?;
        Ok(results[0])
    }

    /// Reduces `input` over `dims` (result drops them). The accumulator starts at `init` and
    /// `combine(acc, x)` folds each element, with `x` converted to `acc`'s dtype.
    pub fn reduce<F>(
        &self,
        input: &Tensor<'c, 'a>,
        dims: &[usize],
        acc: DType,
        init: Scalar,
        combine: F,
    ) -> Result<Tensor<'c, 'a>>
    where
        F: for<'b> FnOnce(&Emit<'c, 'b>, Value<'c, 'b>, Value<'c, 'b>) -> Result<Value<'c, 'b>>,
    {
        let rank = input.rank();
        let kept: Vec<usize> = (0..rank).filter(|d| !dims.contains(d)).collect();
        let out_shape: Vec<i64> = kept.iter().map(|&d| input.shape[d]).collect();
        let init = self.e.splat(&out_shape, acc, init)?;
        let iters: Vec<Iter> = (0..rank)
            .map(|d| {
                if dims.contains(&d) {
                    Iter::Reduction
                } else {
                    Iter::Parallel
                }
            })
            .collect();
        let out_map = emit::affine_map(rank, &kept.iter().map(|&d| Some(d)).collect::<Vec<_>>());
        let from = input.dtype;
        let results = self.e.generic(
            &[(input.value, emit::identity_map(rank))],
            &[(init, out_map)],
            &iters,
            |b, args| {
                let x = b.convert(args[0], from, acc)?;
                Ok(vec![combine(b, args[1], x)?])
            },
        )?;
        Ok(Tensor {
            value: results[0],
            shape: out_shape,
            dtype: acc,
        })
    }

    /// Casts a whole tensor to another dtype.
    pub fn cast(&self, t: &Tensor<'c, 'a>, to: DType) -> Result<Tensor<'c, 'a>> {
        if t.dtype == to {
            return Ok(t.clone());
        }
        let value = self.elementwise(
            &[Operand::Tensor(t.clone())],
            &[t.dtype],
            t.dtype,
            &t.shape,
            to,
            |_, v| Ok(v[0]),
        )?;
        Ok(Tensor {
            value,
            shape: t.shape.clone(),
            dtype: to,
        })
    }

    pub fn reshape(&self, t: &Tensor<'c, 'a>, shape: &[i64]) -> Result<Tensor<'c, 'a>> {
        Ok(Tensor {
            value: self.e.reshape(t.value, &t.shape, shape, t.dtype)?,
            shape: shape.to_vec(),
            dtype: t.dtype,
        })
    }
}

pub fn scalar_of(arg: &Arg) -> Option<Scalar> {
    match arg {
        Arg::Int(i) => Some(Scalar::Int(*i)),
        Arg::Float(f) => Some(Scalar::Float(f.value())),
        Arg::Bool(b) => Some(Scalar::Bool(*b)),
        _ => None,
    }
}

/// Normalises a possibly negative dimension index against `rank`.
pub fn norm_dim(dim: i64, rank: usize) -> Result<usize> {
    let r = rank.max(1) as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return fail(format!("dimension {dim} is out of range for rank {rank}"));
    }
    Ok(d as usize)
}

fn node_location<'c>(context: &'c Context, node: &Node) -> Location<'c> {
    let child = match &node.source {
        Some(s) => Location::new(context, &s.file, s.line as usize, 0),
        None => Location::unknown(context),
    };
    Location::name(context, &format!("{} ({})", node.target, node.name), child)
}

/// The nodes whose lowerings check runtime values (indices), in order: the status buffer's
/// code `k` (from 1) names the `k`-th, with what PyTorch raises for it.
pub fn checked_nodes(graph: &Graph) -> Result<Vec<(NodeSite, Check)>> {
    let registry = Registry::global()?;
    Ok(graph
        .nodes
        .iter()
        .filter(|n| n.lowering.is_none())
        .filter_map(|n| {
            let checked = registry.get(&n.target)?.checked?;
            (checked.applies)(n).then(|| (n.site(), checked.check))
        })
        .collect())
}

/// Whether `arg` is a symbolic integer (a size used as a number) or a list holding one.
fn symbolic_number(arg: &Arg) -> bool {
    match arg {
        Arg::Int(v) => crate::graph::dims::is_symbolic(*v),
        Arg::Ratio(_) => true,
        Arg::List(items) => items.iter().any(symbolic_number),
        _ => false,
    }
}

/// Whether `node` of a graph with symbolic sizes can be lowered: its row takes symbolic
/// sizes, and none of its arguments is a symbolic integer (a size used as a value).
fn check_symbolic(node: &Node, lowering: &Lowering) -> Result<()> {
    if lowering.per_sample && !lowering.dynamic {
        return fail(
            "its lowering takes a symbolic batch only: the first size of its first argument and outputs, every other size fixed, no index into the batch (compile the graph for fixed sizes)",
        );
    }
    if !lowering.dynamic {
        return fail(
            "its lowering does not take symbolic sizes (compile the graph for fixed sizes)",
        );
    }
    if node.args.iter().any(symbolic_number)
        && !SYMBOLIC_ARGUMENT_FAMILIES.contains(&lowering.family)
        && !SYMBOLIC_ARGUMENTS.contains(&node.target.as_str())
    {
        return fail(
            "a symbolic size as an argument is not supported (compile the graph for fixed sizes)",
        );
    }
    Ok(())
}

/// The nodes whose kernel code calls back into the host to run them (a collective runs in
/// PyTorch's c10d), in order: the host call number `k` (from 0) names the `k`-th.
pub fn host_calls(graph: &Graph) -> Result<Vec<NodeSite>> {
    let registry = Registry::global()?;
    Ok(graph
        .nodes
        .iter()
        .filter(|n| n.lowering.is_none())
        .filter(|n| registry.get(&n.target).is_some_and(|l| l.calls_host))
        .map(Node::site)
        .collect())
}

/// The function a kernel calls to have its host run a node:
/// `@fxmlir_host_call(call number, source buffer address, target buffer address)`, resolved
/// by the JIT to [`crate::jit::host`]'s handler.
pub const HOST_CALL: &str = "fxmlir_host_call";

/// `func.func private @fxmlir_host_call(i64, i64, i64)`.
fn host_call_declaration<'c>(
    context: &'c Context,
    location: Location<'c>,
) -> Result<Operation<'c>> {
    let i64_type = Type::parse(context, "i64")
        .ok_or_else(|| lowering_error("cannot parse i64".to_string()))?;
    let function = func::func(
        context,
        StringAttribute::new(context, HOST_CALL),
        TypeAttribute::new(FunctionType::new(context, &[i64_type; 3], &[]).into()),
        Region::new(),
        &[(
            Identifier::new(context, "sym_visibility"),
            StringAttribute::new(context, "private").into(),
        )],
        location,
    );
    Ok(function)
}

/// Lowers a validated graph to a module holding `func.func @<graph.name>`, whose arguments are
/// the inputs' memrefs (with their strides), one memref per output, written in place, and,
/// with `checks` and a graph that has checked nodes ([`checked_nodes`]), the status buffer
/// (`memref<1xi64>`, 0 on entry) where a failed check leaves its node's code.
pub fn lower_graph<'c>(
    context: &'c Context,
    graph: &Graph,
    target: &Target,
    checks: bool,
) -> Result<Module<'c>> {
    let registry = Registry::global()?;
    let func_loc = Location::name(context, &graph.name, Location::unknown(context));
    let module = Module::new(func_loc);
    let parse = |text: &str| {
        Type::parse(context, text).ok_or_else(|| Error::InvalidGraph(format!("bad type {text}")))
    };

    let mut arg_types = Vec::new();
    for input in &graph.inputs {
        let m = &input.meta;
        arg_types.push(parse(&emit::memref_type_text(
            &m.shape, &m.strides, m.dtype,
        ))?);
    }
    let output_metas: Vec<&TensorMeta> = graph
        .outputs
        .iter()
        .map(|r| {
            graph
                .meta(r)
                .ok_or_else(|| Error::InvalidGraph(format!("no metadata for output `{}`", r.node)))
        })
        .collect::<Result<_>>()?;
    for m in &output_metas {
        arg_types.push(parse(&emit::memref_type_text(
            &m.shape, &m.strides, m.dtype,
        ))?);
    }
    let checked: Vec<String> = if checks {
        checked_nodes(graph)?
            .into_iter()
            .map(|(site, _)| site.node)
            .collect()
    } else {
        Vec::new()
    };
    if !checked.is_empty() {
        arg_types.push(parse("memref<1xi64>")?);
    }
    let host = host_calls(graph)?;

    let block = Block::new(&arg_types.iter().map(|t| (*t, func_loc)).collect::<Vec<_>>());
    // The symbolic batch of each node lowered per sample (see `samples`).
    let batches: Vec<Option<i64>> = graph
        .nodes
        .iter()
        .map(|n| {
            let per_sample = registry.get(&n.target)?.per_sample;
            per_sample.then(|| samples::batch_of(graph, n)).flatten()
        })
        .collect();
    // The blocks of the decomposition functions of the nodes fxmlir's rows lower whole, and
    // the bodies of the loops of the nodes lowered per sample, in node order.
    let bodies: Vec<Block> = graph
        .nodes
        .iter()
        .filter(|n| {
            n.lowering.is_none() && registry.get(&n.target).is_some_and(|l| l.whole.is_some())
        })
        .map(|_| Block::new(&[]))
        .collect();
    let sample_bodies: Vec<Block> = batches.iter().flatten().map(|_| Block::new(&[])).collect();
    let mut next_sample_body = sample_bodies.iter();
    let one_thread = target.clone().with_threads(1);
    let mut next_body = bodies.iter();
    let decompositions = {
        let entry = Emit {
            context,
            block: &block,
            loc: func_loc,
        };
        let mut ctx = LowerCtx {
            e: entry,
            target,
            one_thread: &one_thread,
            graph,
            values: HashMap::new(),
            shapes: HashMap::new(),
            node_outputs: vec![],
            decompositions: Vec::new(),
            loops: Vec::new(),
            status: None,
            check_code: 0,
            host_slot: None,
        };
        if !checked.is_empty() {
            let status = block
                .argument(graph.inputs.len() + graph.outputs.len())
                .map_err(|e| Error::Llvm(e.to_string()))?;
            ctx.status = Some(status.into());
        }
        let restrict = Attribute::unit(context);
        for (i, input) in graph.inputs.iter().enumerate() {
            let arg: Value = block
                .argument(i)
                .map_err(|e| Error::Llvm(e.to_string()))?
                .into();
            let ty = ctx.e.tensor_type(&input.meta.shape, input.meta.dtype)?;
            let loc = Location::name(context, &input.name, Location::unknown(context));
            let e = Emit { loc, ..entry };
            let t = e.op1(
                "bufferization.to_tensor",
                &[arg],
                ty,
                &[("restrict", restrict)],
            )?;
            ctx.values.insert(
                ValueRef {
                    node: input.name.clone(),
                    index: 0,
                },
                t,
            );
        }
        for constant in &graph.constants {
            let loc = Location::name(context, &constant.name, Location::unknown(context));
            let e = Emit { loc, ..entry };
            let v = constant_tensor(&e, constant)?;
            ctx.values.insert(
                ValueRef {
                    node: constant.name.clone(),
                    index: 0,
                },
                v,
            );
        }
        for (node, batch) in graph.nodes.iter().zip(&batches) {
            let site = node.site();
            ctx.e.loc = node_location(context, node);
            ctx.node_outputs = node.outputs.clone();
            ctx.check_code = checked
                .iter()
                .position(|n| *n == node.name)
                .map_or(0, |k| k as i64 + 1);
            ctx.host_slot = host
                .iter()
                .position(|site| site.node == node.name)
                .map(|k| k as i64);
            let results = match &node.lowering {
                Some(given) => whole::external(&mut ctx, node, given),
                None => {
                    let lowering = registry
                        .get(&node.target)
                        .ok_or_else(|| Error::UnsupportedOp(site.clone()))?;
                    if !graph.symbols.is_empty() && batch.is_none() {
                        check_symbolic(node, lowering).map_err(|e| attach_site(e, &site))?;
                    }
                    let lower = &*lowering.lower;
                    match (&lowering.whole, batch) {
                        (Some(w), _) => match next_body.next() {
                            Some(body) => whole::lower(&mut ctx, node, w, body, lower),
                            None => fail("no block was made for its decomposition".to_string()),
                        },
                        (None, Some(batch)) => match next_sample_body.next() {
                            Some(body) => samples::lower(&mut ctx, node, *batch, body, lower),
                            None => fail("no block was made for its loop over the batch"),
                        },
                        (None, None) => lower(&mut ctx, node),
                    }
                }
            }
            .map_err(|e| attach_site(e, &site))?;
            if results.len() != node.outputs.len() {
                return Err(attach_site(
                    lowering_error(format!(
                        "lowering produced {} values for {} outputs",
                        results.len(),
                        node.outputs.len()
                    )),
                    &site,
                ));
            }
            for (index, (value, meta)) in results.into_iter().zip(&node.outputs).enumerate() {
                let expected = ctx.e.tensor_type(&meta.shape, meta.dtype)?;
                if value.r#type() != expected {
                    return Err(attach_site(
                        lowering_error(format!(
                            "output {index} has type {} but the graph records {expected}",
                            value.r#type()
                        )),
                        &site,
                    ));
                }
                ctx.values.insert(
                    ValueRef {
                        node: node.name.clone(),
                        index,
                    },
                    value,
                );
            }
        }
        let unit = Attribute::unit(context);
        for (i, out) in graph.outputs.iter().enumerate() {
            let dest: Value = block
                .argument(graph.inputs.len() + i)
                .map_err(|e| Error::Llvm(e.to_string()))?
                .into();
            let value = ctx.values[out];
            let loc = Location::name(context, &format!("output {i}"), Location::unknown(context));
            let e = Emit { loc, ..entry };
            e.op(
                "bufferization.materialize_in_destination",
                &[value, dest],
                &[],
                &[("restrict", unit), ("writable", unit)],
            )?;
        }
        block.append_operation(func::r#return(&[], func_loc));
        (ctx.decompositions, ctx.loops)
    };
    let (decompositions, loops) = decompositions;
    samples::attach(&loops, sample_bodies)?;
    let inputs: Vec<&[i64]> = graph.inputs.iter().map(|i| &i.meta.shape[..]).collect();
    sizes::resolve(context, &block, graph, &inputs, func_loc)?;
    let region = Region::new();
    region.append_block(block);
    let fn_type = FunctionType::new(context, &arg_types, &[]);
    let function = func::func(
        context,
        StringAttribute::new(context, &graph.name),
        TypeAttribute::new(fn_type.into()),
        region,
        &[(
            Identifier::new(context, "llvm.emit_c_interface"),
            Attribute::unit(context),
        )],
        func_loc,
    );
    module.body().append_operation(function);
    for decomposition in whole::functions(context, decompositions, bodies) {
        module.body().append_operation(decomposition);
    }
    if !host.is_empty() {
        module
            .body()
            .append_operation(host_call_declaration(context, func_loc)?);
    }
    let mut module = module;
    set_target(context, &mut module, target);
    Ok(module)
}

/// The module attribute that records the target a module was lowered for (its
/// [`Target::describe`] spec): every dump says which CPU it is for, and `fxmlir-opt` compiles
/// a dump for that target unless `--target` says otherwise.
pub const TARGET_ATTRIBUTE: &str = "fxmlir.target";

/// Records `target` on `module` (see [`TARGET_ATTRIBUTE`]).
pub fn set_target(context: &Context, module: &mut Module, target: &Target) {
    module.as_operation_mut().set_attribute(
        TARGET_ATTRIBUTE,
        StringAttribute::new(context, &target.describe()).into(),
    );
}

/// The target spec a module records (see [`TARGET_ATTRIBUTE`]), if it records one.
pub fn recorded_target(module: &Module) -> Option<String> {
    let attribute = module.as_operation().attribute(TARGET_ATTRIBUTE).ok()?;
    StringAttribute::try_from(attribute)
        .ok()
        .map(|s| s.value().to_string())
}

fn attach_site(e: Error, site: &NodeSite) -> Error {
    match e {
        Error::Lowering { site: s, message } if s.node.is_empty() => Error::Lowering {
            site: site.clone(),
            message,
        },
        other => other,
    }
}

/// A graph constant as an `arith.constant` dense tensor.
fn constant_tensor<'c, 'a>(e: &Emit<'c, 'a>, c: &crate::graph::Constant) -> Result<Value<'c, 'a>> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&c.data)
        .map_err(|err| Error::InvalidGraph(format!("constant `{}`: bad base64: {err}", c.name)))?;
    let meta = &c.meta;
    if !meta.is_contiguous() {
        return Err(Error::InvalidGraph(format!(
            "constant `{}` must be contiguous",
            c.name
        )));
    }
    let expected = meta.numel() as usize * meta.dtype.byte_size();
    if bytes.len() != expected {
        return Err(Error::InvalidGraph(format!(
            "constant `{}` has {} bytes of data, its shape and dtype need {expected}",
            c.name,
            bytes.len()
        )));
    }
    // Bool data is written as a flat list of literals and reshaped; other types as raw hex.
    let flat_bool = meta.dtype.is_bool() && meta.rank() > 0;
    let literal_shape = if flat_bool {
        vec![meta.numel()]
    } else {
        meta.shape.clone()
    };
    let ty = emit::tensor_type_text(&literal_shape, meta.dtype);
    let text = if meta.dtype.is_bool() {
        let items: Vec<&str> = bytes
            .iter()
            .map(|b| if *b != 0 { "true" } else { "false" })
            .collect();
        if flat_bool {
            format!("dense<[{}]> : {ty}", items.join(", "))
        } else {
            format!("dense<{}> : {ty}", items.join(", "))
        }
    } else {
        let hex: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
        format!("dense<\"0x{hex}\"> : {ty}")
    };
    let attr = e.attr(&text)?;
    let value = e.op1("arith.constant", &[], e.ty(&ty)?, &[("value", attr)])?;
    e.reshape(value, &literal_shape, &meta.shape, meta.dtype)
}
