//! Building ops by name with the generic builder, at a location, before an op: the stages that
//! rewrite IR in place (the chains after products, bf16 pair reads, vector math) share it.

use super::items;
use super::ops::{tensor_shape, type_sizes};
use crate::error::{Error, Result};
use melior::{
    Context,
    ir::{
        Attribute, BlockLike, Identifier, Location, Operation, OperationRef, Region, Type, Value,
        ValueLike, operation::OperationBuilder, operation::OperationLike, r#type::MemRefType,
    },
};

/// Builds ops before one anchor op of a function body.
pub struct Builder<'c, 'a> {
    pub context: &'c Context,
    /// The stage whose hook builds: errors name it.
    pub stage: &'static str,
    pub anchor: OperationRef<'c, 'a>,
    pub location: Location<'c>,
}

impl<'c, 'a> Builder<'c, 'a> {
    fn attribute(&self, text: &str) -> Result<Attribute<'c>> {
        Attribute::parse(self.context, text)
            .ok_or_else(|| Error::stage(self.stage, format!("cannot parse the attribute {text}")))
    }

    fn insert(&self, op: Operation<'c>) -> Result<OperationRef<'c, 'a>> {
        let block = self
            .anchor
            .block()
            .ok_or_else(|| Error::stage(self.stage, "an op outside any block".to_string()))?;
        Ok(block.insert_operation_before(self.anchor, op))
    }

    pub fn build(
        &self,
        op: &str,
        operands: &[Value<'c, 'a>],
        result: Type<'c>,
        attributes: &[(&str, String)],
        regions: Vec<Region<'c>>,
    ) -> Result<Value<'c, 'a>> {
        let attributes = attributes
            .iter()
            .map(|(k, v)| Ok((Identifier::new(self.context, k), self.attribute(v)?)))
            .collect::<Result<Vec<_>>>()?;
        let built = OperationBuilder::new(op, self.location)
            .add_operands(operands)
            .add_results(&[result])
            .add_attributes(&attributes)
            .add_regions_vec(regions)
            .build()
            .map_err(|e| Error::stage(self.stage, format!("{op}: {e}")))?;
        Ok(self
            .insert(built)?
            .result(0)
            .map_err(|e| Error::stage(self.stage, e.to_string()))?
            .into())
    }

    /// The `index` constant `value`.
    pub fn index(&self, value: i64) -> Result<Value<'c, 'a>> {
        self.build(
            "arith.constant",
            &[],
            Type::index(self.context),
            &[("value", format!("{value} : index"))],
            vec![],
        )
    }

    /// `value`'s size along dimension `d` (a `tensor.dim` or `memref.dim`).
    pub fn dim(&self, value: Value<'c, 'a>, d: usize) -> Result<Value<'c, 'a>> {
        let d = self.index(d as i64)?;
        self.build(
            &format!("{}.dim", kind(value)),
            &[value, d],
            Type::index(self.context),
            &[],
            vec![],
        )
    }

    /// `value` (a tensor or memref, static or dynamic) collapsed along `groups` (for each
    /// dimension of the result, the dimensions of `value` it holds) into the type `to`.
    pub fn collapse(
        &self,
        value: Value<'c, 'a>,
        groups: &[Vec<usize>],
        to: Type<'c>,
    ) -> Result<Value<'c, 'a>> {
        let reassociation = ("reassociation", reassociation_text(groups));
        let op = format!("{}.collapse_shape", kind(value));
        self.build(&op, &[value], to, &[reassociation], vec![])
    }

    /// `value` (a tensor or memref, static or dynamic) expanded along `groups` (for each
    /// dimension of `value`, the dimensions of the result it splits into) into the type `to`,
    /// whose dynamic sizes are `sizes`.
    pub fn expand(
        &self,
        value: Value<'c, 'a>,
        groups: &[Vec<usize>],
        to: Type<'c>,
        sizes: &[Value<'c, 'a>],
    ) -> Result<Value<'c, 'a>> {
        let shape: Vec<i64> = type_sizes(to)
            .ok_or_else(|| Error::stage(self.stage, format!("an expansion into {to}")))?
            .iter()
            .map(|s| s.unwrap_or(i64::MIN))
            .collect();
        let operands: Vec<Value> = std::iter::once(value)
            .chain(sizes.iter().copied())
            .collect();
        self.build(
            &format!("{}.expand_shape", kind(value)),
            &operands,
            to,
            &[
                ("reassociation", reassociation_text(groups)),
                (
                    "static_output_shape",
                    format!("array<i64: {}>", items(&shape)),
                ),
            ],
            vec![],
        )
    }

    /// The dynamic sizes of `value` expanded along `groups` into the type `to`, computed
    /// from `value`'s sizes: a group's one dynamic size is its source size over the product of
    /// the group's static ones. A group of two dynamic sizes is an error (callers check with
    /// [`regroupable`]).
    pub fn expanded_sizes(
        &self,
        value: Value<'c, 'a>,
        groups: &[Vec<usize>],
        to: Type<'c>,
    ) -> Result<Vec<Value<'c, 'a>>> {
        let sizes = type_sizes(to)
            .filter(|sizes| regroupable(groups, sizes))
            .ok_or_else(|| {
                Error::stage(self.stage, format!("the sizes of an expansion into {to}"))
            })?;
        let mut out = Vec::new();
        for (g, group) in groups.iter().enumerate() {
            if group.iter().any(|&d| sizes[d].is_none()) {
                let known: i64 = group.iter().filter_map(|&d| sizes[d]).product();
                let whole = self.dim(value, g)?;
                out.push(if known == 1 {
                    whole
                } else {
                    let known = self.index(known)?;
                    self.build(
                        "arith.divui",
                        &[whole, known],
                        Type::index(self.context),
                        &[],
                        vec![],
                    )?
                });
            }
        }
        Ok(out)
    }

    /// `value` (a static tensor) as `shape`: collapsed to 1-D, then expanded.
    pub fn reshape(&self, value: Value<'c, 'a>, shape: &[i64]) -> Result<Value<'c, 'a>> {
        let (from, element) = tensor_shape(value)
            .ok_or_else(|| Error::stage(self.stage, "a reshape of a dynamic tensor".to_string()))?;
        self.reshape_as("tensor", value, &from, &element, shape)
    }

    /// `value`, of `kind` (`tensor` or an identity-layout `memref`) with the static shape
    /// `from`, as `shape`: collapsed to 1-D, then expanded.
    pub fn reshape_as(
        &self,
        kind: &str,
        value: Value<'c, 'a>,
        from: &[i64],
        element: &str,
        shape: &[i64],
    ) -> Result<Value<'c, 'a>> {
        if from == shape {
            return Ok(value);
        }
        let numel: i64 = from.iter().product();
        let group = |n: usize| {
            let dims: Vec<String> = (0..n).map(|i| i.to_string()).collect();
            format!("[[{}]]", dims.join(", "))
        };
        let ty = |dims: &[i64]| {
            let text: String = dims.iter().map(|d| format!("{d}x")).collect();
            Type::parse(self.context, &format!("{kind}<{text}{element}>"))
                .ok_or_else(|| Error::stage(self.stage, format!("a {kind} of {dims:?}")))
        };
        // A 0-d value has no dimension to group: it becomes [1] (and back) by an expand (a
        // collapse) with no reassociation groups.
        let expand = |value: Value<'c, 'a>, rank: usize, shape: &[i64]| {
            let sizes: Vec<String> = shape.iter().map(i64::to_string).collect();
            let groups = if rank == 0 {
                "[]".to_string()
            } else {
                group(shape.len())
            };
            let attributes = [
                ("reassociation", groups),
                (
                    "static_output_shape",
                    format!("array<i64: {}>", sizes.join(", ")),
                ),
            ];
            self.build(
                &format!("{kind}.expand_shape"),
                &[value],
                ty(shape)?,
                &attributes,
                vec![],
            )
        };
        let collapse = |value: Value<'c, 'a>, rank: usize, shape: &[i64]| {
            let groups = if shape.is_empty() {
                "[]".to_string()
            } else {
                group(rank)
            };
            self.build(
                &format!("{kind}.collapse_shape"),
                &[value],
                ty(shape)?,
                &[("reassociation", groups)],
                vec![],
            )
        };
        let flat = match from.len() {
            1 => value,
            0 => expand(value, 0, &[1])?,
            rank => collapse(value, rank, &[numel])?,
        };
        match shape.len() {
            1 => Ok(flat),
            0 => collapse(flat, 1, &[]),
            _ => expand(flat, 1, shape),
        }
    }
}

/// Whether an expansion into `sizes` along `groups` can compute its sizes: each group holds at
/// most one dynamic size.
pub fn regroupable(groups: &[Vec<usize>], sizes: &[Option<i64>]) -> bool {
    groups.iter().all(|g| {
        g.iter()
            .filter(|&&d| sizes.get(d).is_none_or(Option::is_none))
            .count()
            <= 1
    })
}

/// `groups` as a reassociation attribute: `[[0, 1], [2]]`.
fn reassociation_text(groups: &[Vec<usize>]) -> String {
    let text: Vec<String> = groups
        .iter()
        .map(|g| {
            format!(
                "[{}]",
                items(&g.iter().map(|&d| d as i64).collect::<Vec<_>>())
            )
        })
        .collect();
    format!("[{}]", text.join(", "))
}

/// The dialect of `value`'s shaped type: `memref` for a memref, else `tensor`.
fn kind(value: Value) -> &'static str {
    if MemRefType::try_from(value.r#type()).is_ok() {
        "memref"
    } else {
        "tensor"
    }
}
