//! Structural checks on a parsed graph, so that lowering can trust names, references and metadata.

use super::{Arg, FORMAT, Graph, Symbol, TensorMeta, VERSION, dims};
use crate::error::{Error, Result};
use std::collections::HashMap;

const MAX_RANK: usize = 16;

impl Graph {
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::InvalidGraph(msg));
        if self.format != FORMAT {
            return bad(format!("format is `{}`, expected `{FORMAT}`", self.format));
        }
        if self.version != VERSION {
            return bad(format!(
                "interchange version {} is not supported (this build reads version {VERSION})",
                self.version
            ));
        }
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return bad(format!(
                "graph name `{}` must be non-empty ASCII letters, digits and `_`",
                self.name
            ));
        }
        for (i, symbol) in self.symbols.iter().enumerate() {
            if symbol.min < 0 || symbol.max < symbol.min {
                return bad(format!(
                    "symbol `{}` has the range [{}, {}]",
                    symbol.name, symbol.min, symbol.max
                ));
            }
            if self.symbols[..i].iter().any(|s| s.name == symbol.name) {
                return bad(format!("symbol `{}` is declared twice", symbol.name));
            }
        }
        // name -> number of outputs
        let mut defined: HashMap<&str, usize> = HashMap::new();
        for input in &self.inputs {
            check_meta(
                &input.meta,
                &self.symbols,
                &format!("input `{}`", input.name),
            )?;
            insert(&mut defined, &input.name, 1, "input")?;
        }
        for constant in &self.constants {
            check_meta(
                &constant.meta,
                &self.symbols,
                &format!("constant `{}`", constant.name),
            )?;
            insert(&mut defined, &constant.name, 1, "constant")?;
        }
        for node in &self.nodes {
            let site = node.site();
            for (i, meta) in node.outputs.iter().enumerate() {
                check_meta(meta, &self.symbols, &format!("{site}, output {i}"))?;
            }
            if !node.arg_names.is_empty() && node.arg_names.len() != node.args.len() {
                return bad(format!(
                    "{site}: {} argument names for {} arguments",
                    node.arg_names.len(),
                    node.args.len()
                ));
            }
            for arg in &node.args {
                check_refs(arg, &defined, &format!("{site}"))?;
            }
            insert(&mut defined, &node.name, node.outputs.len(), "node")?;
        }
        if self.outputs.is_empty() {
            return bad("the graph has no outputs".to_string());
        }
        for output in &self.outputs {
            check_refs(&Arg::Ref(output.clone()), &defined, "graph output")?;
        }
        Ok(())
    }
}

fn insert<'g>(
    defined: &mut HashMap<&'g str, usize>,
    name: &'g str,
    arity: usize,
    what: &str,
) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidGraph(format!("a {what} has an empty name")));
    }
    if defined.insert(name, arity).is_some() {
        return Err(Error::InvalidGraph(format!(
            "the name `{name}` is defined twice"
        )));
    }
    Ok(())
}

fn check_refs(arg: &Arg, defined: &HashMap<&str, usize>, whose: &str) -> Result<()> {
    match arg {
        Arg::Ref(r) => match defined.get(r.node.as_str()) {
            None => Err(Error::InvalidGraph(format!(
                "{whose} uses `{}`, which is not defined before it",
                r.node
            ))),
            Some(&arity) if r.index >= arity => Err(Error::InvalidGraph(format!(
                "{whose} uses output {} of `{}`, which has {arity} output(s)",
                r.index, r.node
            ))),
            Some(_) => Ok(()),
        },
        Arg::List(items) => items.iter().try_for_each(|a| check_refs(a, defined, whose)),
        _ => Ok(()),
    }
}

fn check_meta(meta: &TensorMeta, symbols: &[Symbol], whose: &str) -> Result<()> {
    let bad = |msg: String| Err(Error::InvalidGraph(format!("{whose}: {msg}")));
    if meta.rank() > MAX_RANK {
        return bad(format!(
            "rank {} exceeds the maximum of {MAX_RANK}",
            meta.rank()
        ));
    }
    if meta.shape.len() != meta.strides.len() {
        return bad(format!(
            "shape {:?} and strides {:?} differ in length",
            meta.shape, meta.strides
        ));
    }
    let fixed = |d: &&i64| !dims::is_symbolic(**d);
    if meta.shape.iter().filter(fixed).any(|&d| d < 0) {
        return bad(format!("shape {:?} has a negative size", meta.shape));
    }
    if meta.strides.iter().filter(fixed).any(|&s| s < 0) {
        return bad(format!("strides {:?} have a negative entry", meta.strides));
    }
    if let Some(unknown) = meta
        .shape
        .iter()
        .chain(&meta.strides)
        .flat_map(|&d| {
            dims::poly_of(d)
                .symbols()
                .into_iter()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .find(|s| !symbols.iter().any(|known| known.name == *s))
    {
        return bad(format!(
            "symbolic size uses `{unknown}`, which the graph does not declare"
        ));
    }
    if meta
        .shape
        .iter()
        .filter(fixed)
        .try_fold(1i64, |acc, &d| acc.checked_mul(d))
        .is_none()
    {
        return bad(format!("shape {:?} overflows 64 bits", meta.shape));
    }
    if meta.device != "cpu" {
        return bad(format!(
            "device `{}` is not supported (fxmlir compiles for the CPU)",
            meta.device
        ));
    }
    Ok(())
}
