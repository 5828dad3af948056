//! Symbolic sizes in the graph function. A lowering that makes a tensor with a symbolic size
//! (see [`crate::graph::dims`]) writes a placeholder `fxmlir.size {size = "128*s0"}` for it
//! ([`Emit::empty`](super::Emit::empty)); [`resolve`] then replaces each placeholder with a
//! value computed once, at the start of the function, from the sizes of the kernel's
//! arguments: each symbol is read (`memref.dim`) off an input one of whose dimensions is that
//! symbol alone, and the polynomials are computed with `arith` on `index` (a floor division
//! with `arith.floordivsi`, a maximum or minimum with `arith.maxsi`, `arith.minsi`).

use super::{
    emit::{SIZE_PLACEHOLDER, internal},
    fail,
};
use crate::error::Result;
use crate::graph::{
    Graph, dims,
    dims::{Factor, Poly},
};
use crate::pipeline::ir::ops::op_name;
use melior::{
    Context,
    ir::{
        Attribute, Block, BlockLike, Identifier, Location, OperationRef, Type, Value, ValueLike,
        attribute::{IntegerAttribute, StringAttribute},
        operation::{OperationBuilder, OperationLike, WalkOrder, WalkResult},
        r#type::MemRefType,
    },
};
use mlir_sys::{mlirOperationDestroy, mlirValueReplaceAllUsesOfWith};
use std::collections::HashMap;

/// Builds ops at the start of the graph function's entry block, in order.
struct Prologue<'c, 'a> {
    context: &'c Context,
    block: &'a Block<'c>,
    anchor: OperationRef<'c, 'a>,
    location: Location<'c>,
    index: Type<'c>,
}

impl<'c, 'a> Prologue<'c, 'a> {
    fn op(
        &self,
        name: &str,
        operands: &[Value<'c, 'a>],
        attributes: &[(&str, Attribute<'c>)],
    ) -> Result<Value<'c, 'a>> {
        let attributes: Vec<_> = attributes
            .iter()
            .map(|(k, v)| (Identifier::new(self.context, k), *v))
            .collect();
        let op = OperationBuilder::new(name, self.location)
            .add_operands(operands)
            .add_results(&[self.index])
            .add_attributes(&attributes)
            .build()
            .map_err(internal)?;
        let op = self.block.insert_operation_before(self.anchor, op);
        Ok(op.result(0).map_err(internal)?.into())
    }

    fn constant(&self, value: i64) -> Result<Value<'c, 'a>> {
        let attribute = IntegerAttribute::new(self.index, value).into();
        self.op("arith.constant", &[], &[("value", attribute)])
    }

    fn arith(&self, name: &str, a: Value<'c, 'a>, b: Value<'c, 'a>) -> Result<Value<'c, 'a>> {
        self.op(name, &[a, b], &[])
    }
}

/// Replaces the placeholders in the function whose entry block is `block`: the graph
/// function (its arguments: the graph's inputs first, memrefs) or a decomposition function
/// (a node's tensor arguments), `arguments` the sizes of its first arguments; an error if a
/// size uses a symbol that is none of their dimensions.
pub(super) fn resolve<'c>(
    context: &'c Context,
    block: &Block<'c>,
    graph: &Graph,
    arguments: &[&[i64]],
    location: Location<'c>,
) -> Result<()> {
    let mut placeholders = Vec::new();
    let mut op = block.first_operation();
    while let Some(current) = op {
        current.walk(WalkOrder::PreOrder, |nested| {
            if op_name(&nested) == SIZE_PLACEHOLDER {
                placeholders.push(nested.to_raw());
            }
            WalkResult::Advance
        });
        op = current.next_in_block();
    }
    let Some(anchor) = block.first_operation() else {
        return Ok(());
    };
    if placeholders.is_empty() {
        return Ok(());
    }
    let prologue = Prologue {
        context,
        block,
        anchor,
        location,
        index: Type::index(context),
    };
    // Each symbol is read off a dimension that is that symbol alone, else one that is a
    // multiple of it (`2*s0` in a decomposition whose arguments do not have `s0` alone: the
    // division is exact).
    let mut symbols: HashMap<String, Value> = HashMap::new();
    for symbol in &graph.symbols {
        let found = |scaled: bool| {
            arguments.iter().enumerate().find_map(|(i, shape)| {
                shape.iter().enumerate().find_map(|(d, &s)| {
                    let poly = dims::poly_of(s);
                    let (name, c) = poly.as_scaled_symbol()?;
                    (name == symbol.name && (c == 1 || (scaled && c > 1))).then_some((i, d, c))
                })
            })
        };
        let Some((i, d, c)) = found(false).or_else(|| found(true)) else {
            continue;
        };
        let argument: Value = block.argument(i).map_err(internal)?.into();
        let dim = prologue.constant(d as i64)?;
        let read = if MemRefType::try_from(argument.r#type()).is_ok() {
            "memref.dim"
        } else {
            "tensor.dim"
        };
        let mut size = prologue.op(read, &[argument, dim], &[])?;
        if c > 1 {
            size = prologue.arith("arith.divui", size, prologue.constant(c)?)?;
        }
        symbols.insert(symbol.name.clone(), size);
    }
    // Every value is computed before any placeholder goes: the anchor may be one.
    let mut computed: HashMap<String, Value> = HashMap::new();
    let mut replacements = Vec::new();
    for raw in placeholders {
        // SAFETY: a live op of the function, collected above; each is replaced once.
        let placeholder = unsafe { OperationRef::from_raw(raw) };
        let text = placeholder
            .attribute("size")
            .ok()
            .and_then(|a| StringAttribute::try_from(a).ok())
            .map(|s| s.value().to_string())
            .ok_or_else(|| internal("a size placeholder without its size"))?;
        let value = match computed.get(&text) {
            Some(&v) => v,
            None => {
                let v = polynomial(&prologue, &Poly::parse(&text)?, &symbols)?;
                computed.insert(text, v);
                v
            }
        };
        let result = placeholder.result(0).map_err(internal)?;
        replacements.push((raw, result.to_raw(), value.to_raw()));
    }
    for (raw, result, value) in replacements {
        // SAFETY: both values are live, of type index; the placeholder has no other use and
        // is destroyed once its uses are replaced.
        unsafe {
            mlirValueReplaceAllUsesOfWith(result, value);
            mlirOperationDestroy(raw);
        }
    }
    Ok(())
}

/// `poly`'s value from the symbols' values.
fn polynomial<'c, 'a>(
    prologue: &Prologue<'c, 'a>,
    poly: &Poly,
    symbols: &HashMap<String, Value<'c, 'a>>,
) -> Result<Value<'c, 'a>> {
    let mut sum: Option<Value> = None;
    for (monomial, coefficient) in poly.terms() {
        let mut term = prologue.constant(coefficient)?;
        for factor in monomial {
            let value = match factor {
                Factor::Symbol(symbol) => match symbols.get(symbol) {
                    Some(&value) => value,
                    None => {
                        return fail(format!(
                            "the size symbol `{symbol}` is no input's dimension, so the kernel \
                             cannot read it"
                        ));
                    }
                },
                Factor::Floor(inner, divisor) => {
                    let dividend = polynomial(prologue, inner, symbols)?;
                    prologue.arith("arith.floordivsi", dividend, prologue.constant(*divisor)?)?
                }
                Factor::Quotient(a, b) => {
                    let dividend = polynomial(prologue, a, symbols)?;
                    // Dynamo's guards keep the divisor positive; at least 1, a size outside
                    // them cannot make the kernel trap.
                    let divisor = polynomial(prologue, b, symbols)?;
                    let divisor = prologue.arith("arith.maxsi", divisor, prologue.constant(1)?)?;
                    prologue.arith("arith.floordivsi", dividend, divisor)?
                }
                Factor::Max(args) | Factor::Min(args) => {
                    let name = match factor {
                        Factor::Max(_) => "arith.maxsi",
                        _ => "arith.minsi",
                    };
                    let mut values = args.iter().map(|a| polynomial(prologue, a, symbols));
                    let first = values
                        .next()
                        .ok_or_else(|| internal("an extreme of no sizes"))??;
                    values.try_fold(first, |acc, v| prologue.arith(name, acc, v?))?
                }
            };
            term = prologue.arith("arith.muli", term, value)?;
        }
        sum = Some(match sum {
            Some(s) => prologue.arith("arith.addi", s, term)?,
            None => term,
        });
    }
    match sum {
        Some(s) => Ok(s),
        None => prologue.constant(0),
    }
}
