//! Loops and nested regions: `scf.for` loops and nests carrying values, `scf.forall`, a tensor
//! filled row block by row block, and the two helpers every region body uses: an outer value
//! inside a nested region ([`reuse`]) and a list element without a panic ([`nth`]).

use super::Emit;
use super::emit::internal;
use crate::error::Result;
use melior::ir::{
    Attribute, Block, BlockLike, Identifier, Region, RegionLike, Type, Value, ValueLike,
    operation::OperationBuilder,
};

/// An outer value used inside a nested region (a `linalg.generic` or `scf.for` body).
pub(super) fn reuse<'c, 'b>(v: Value<'c, '_>) -> Value<'c, 'b> {
    // SAFETY: `v` is a valid value of the function being built, defined in an enclosing block
    // that dominates the nested region; the lifetime only tracks the borrow of its block.
    unsafe { Value::from_raw(v.to_raw()) }
}

/// `xs[i]`, or an internal error instead of a panic.
pub(super) fn nth<T: Copy>(xs: &[T], i: usize) -> Result<T> {
    xs.get(i)
        .copied()
        .ok_or_else(|| internal(format!("no element {i} among {}", xs.len())))
}

/// `scf.for %iv = lower to upper step step iter_args(inits)`; `body(emit, iv, carried)`
/// returns the values to yield. Returns the loop's results.
pub(super) fn for_loop<'c, 'a, F>(
    e: &Emit<'c, 'a>,
    lower: Value<'c, 'a>,
    upper: Value<'c, 'a>,
    step: Value<'c, 'a>,
    inits: &[Value<'c, 'a>],
    body: F,
) -> Result<Vec<Value<'c, 'a>>>
where
    F: for<'b> FnOnce(&Emit<'c, 'b>, Value<'c, 'b>, &[Value<'c, 'b>]) -> Result<Vec<Value<'c, 'b>>>,
{
    let mut operands = vec![lower, upper, step];
    operands.extend_from_slice(inits);
    loop_op(e, "scf.for", &operands, inits, &[], |inner, iv, carried| {
        let yielded = body(inner, iv, carried)?;
        inner.op("scf.yield", &yielded, &[], &[])?;
        Ok(())
    })
}

/// `scf.forall %iv in (count) shared_outs(outs)`: iterations that may run in any order or at
/// once (the `loops` stage hands the loop to OpenMP). `body(emit, writes, iv, shared)` builds
/// one iteration in `emit` and its writes into the shared outputs in `writes`, the loop's
/// `scf.forall.in_parallel` block (`Emit::insert_at` with `parallel`). Returns the loop's
/// results, the shared outputs after every iteration's writes.
pub(super) fn forall<'c, 'a, F>(
    e: &Emit<'c, 'a>,
    count: i64,
    outs: &[Value<'c, 'a>],
    body: F,
) -> Result<Vec<Value<'c, 'a>>>
where
    F: for<'b> FnOnce(&Emit<'c, 'b>, &Emit<'c, 'b>, Value<'c, 'b>, &[Value<'c, 'b>]) -> Result<()>,
{
    let segments = format!("array<i32: 0, 0, 0, {}>", outs.len());
    let attrs = [
        ("staticLowerBound", e.attr("array<i64: 0>")?),
        ("staticUpperBound", e.attr(&format!("array<i64: {count}>"))?),
        ("staticStep", e.attr("array<i64: 1>")?),
        ("operandSegmentSizes", e.attr(&segments)?),
    ];
    loop_op(e, "scf.forall", outs, outs, &attrs, |inner, iv, shared| {
        let writes = Block::new(&[]);
        let parallel = Emit {
            block: &writes,
            ..*inner
        };
        body(inner, &parallel, iv, shared)?;
        let region = Region::new();
        region.append_block(writes);
        let terminator = OperationBuilder::new("scf.forall.in_parallel", inner.loc)
            .add_regions_vec(vec![region])
            .build()
            .map_err(|err| internal(format!("scf.forall.in_parallel: {err}")))?;
        inner.block.append_operation(terminator);
        Ok(())
    })
}

/// `init` (of `shape`) filled along dimension 0 by `count` pieces: `piece(emit, iv)` builds
/// iteration `iv`'s piece and its first row (`len` rows, or one row with the dimension dropped
/// for `None`). The iterations are an [`forall`] when `parallel`, else an `scf.for` carrying
/// the result.
pub(super) fn fill_rows<'c, 'a, F>(
    e: &Emit<'c, 'a>,
    init: Value<'c, 'a>,
    shape: &[i64],
    (count, len): (i64, Option<i64>),
    parallel: bool,
    piece: &F,
) -> Result<Value<'c, 'a>>
where
    F: for<'b> Fn(&Emit<'c, 'b>, Value<'c, 'b>) -> Result<(Value<'c, 'b>, Value<'c, 'b>)>,
{
    let result = if parallel {
        forall(e, count, &[init], |b, writes, iv, shared| {
            let (rows, first) = piece(b, iv)?;
            let at = (0, reuse(first), len);
            writes.insert_at(reuse(rows), nth(shared, 0)?, shape, at, true)?;
            Ok(())
        })?
    } else {
        loop_nest(e, &[count], &[init], &|b, iv, carried| {
            let (rows, first) = piece(b, nth(iv, 0)?)?;
            let at = (0, first, len);
            Ok(vec![b.insert_at(
                rows,
                nth(carried, 0)?,
                shape,
                at,
                false,
            )?])
        })?
    };
    nth(&result, 0)
}

/// A loop op `name` whose body block takes the induction variable and one value per
/// `carried` (filled by `fill(emit, iv, carried)`, terminator included) and whose results
/// have the types of `carried`.
fn loop_op<'c, 'a, F>(
    e: &Emit<'c, 'a>,
    name: &str,
    operands: &[Value<'c, 'a>],
    carried: &[Value<'c, 'a>],
    attrs: &[(&str, Attribute<'c>)],
    fill: F,
) -> Result<Vec<Value<'c, 'a>>>
where
    F: for<'b> FnOnce(&Emit<'c, 'b>, Value<'c, 'b>, &[Value<'c, 'b>]) -> Result<()>,
{
    let mut arg_types = vec![(e.ty("index")?, e.loc)];
    arg_types.extend(carried.iter().map(|v| (v.r#type(), e.loc)));
    let block = Block::new(&arg_types);
    {
        let inner = Emit {
            block: &block,
            ..*e
        };
        let args: Vec<Value<'c, '_>> = (0..arg_types.len())
            .map(|i| block.argument(i).map(Into::into).map_err(internal))
            .collect::<Result<_>>()?;
        fill(&inner, nth(&args, 0)?, &args[1..])?;
    }
    let region = Region::new();
    region.append_block(block);
    let attrs: Vec<(Identifier<'c>, Attribute<'c>)> = attrs
        .iter()
        .map(|(k, v)| (Identifier::new(e.context, k), *v))
        .collect();
    let results: Vec<Type<'c>> = carried.iter().map(|v| v.r#type()).collect();
    let op = OperationBuilder::new(name, e.loc)
        .add_operands(operands)
        .add_results(&results)
        .add_attributes(&attrs)
        .add_regions_vec(vec![region])
        .build()
        .map_err(|err| internal(format!("{name}: {err}")))?;
    let op = e.block.append_operation(op);
    (0..carried.len())
        .map(|i| op.result(i).map(Into::into).map_err(internal))
        .collect()
}

/// A row-major nest of `scf.for` loops over `bounds` carrying `inits`; `body(emit, ivs,
/// carried)` returns the values to yield. With no bounds the body runs once, inline.
pub(super) fn loop_nest<'c, 'a, F>(
    e: &Emit<'c, 'a>,
    bounds: &[i64],
    inits: &[Value<'c, 'a>],
    body: &F,
) -> Result<Vec<Value<'c, 'a>>>
where
    F: for<'b> Fn(&Emit<'c, 'b>, &[Value<'c, 'b>], &[Value<'c, 'b>]) -> Result<Vec<Value<'c, 'b>>>,
{
    nest(e, bounds, &[], inits, body)
}

fn nest<'c, 'a, F>(
    e: &Emit<'c, 'a>,
    bounds: &[i64],
    ivs: &[Value<'c, 'a>],
    carried: &[Value<'c, 'a>],
    body: &F,
) -> Result<Vec<Value<'c, 'a>>>
where
    F: for<'b> Fn(&Emit<'c, 'b>, &[Value<'c, 'b>], &[Value<'c, 'b>]) -> Result<Vec<Value<'c, 'b>>>,
{
    let Some((&n, rest)) = bounds.split_first() else {
        return body(e, ivs, carried);
    };
    let (lower, upper, step) = (e.index(0)?, e.size(n)?, e.index(1)?);
    let outer = ivs.to_vec();
    for_loop(e, lower, upper, step, carried, |b, iv, carried| {
        let mut ivs: Vec<Value> = outer.iter().map(|&v| reuse(v)).collect();
        ivs.push(iv);
        nest(b, rest, &ivs, carried, body)
    })
}
