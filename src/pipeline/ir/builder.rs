//! Building ops by name with the generic builder, at a location, before an op: the stages that
//! rewrite IR in place (the chains after products, bf16 pair reads, vector math) share it.

use super::ops::tensor_shape;
use crate::error::{Error, Result};
use melior::{
    Context,
    ir::{
        Attribute, BlockLike, Identifier, Location, Operation, OperationRef, Region, Type, Value,
        operation::OperationBuilder, operation::OperationLike,
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
