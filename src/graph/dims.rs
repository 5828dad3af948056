//! Symbolic sizes. In a graph compiled for every size Dynamo's guards accept, a dimension or
//! stride may be a polynomial over the graph's size symbols and over floor divisions, maxima
//! and minima of such polynomials (`s0`, `128*s0`, `s0*s1 + 1`, `((s0 + 1)//2)`,
//! `max(1, s0)`), written as text in the interchange document.
//!
//! In memory such a size is a *marker*: a negative `i64` (never a real size or stride) that
//! names the polynomial in a process-wide table, so that shapes stay `Vec<i64>` and code that
//! only carries shapes around (an elementwise op's output shape, a broadcast) works on them
//! unchanged; equal polynomials have equal markers. MLIR types print a marker as `?`, and the
//! lowering turns it into a value computed from the kernel's arguments (see
//! `lower::sizes`). Code that does arithmetic on sizes must handle markers explicitly, which
//! is why only the registry rows marked dynamic take symbolic sizes.

use crate::error::{Error, Result};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::{Mutex, OnceLock, PoisonError};

/// A factor of a monomial: a size symbol, the floor of a polynomial divided by an integer
/// above 1 (a pooled or strided size: `(s0 + 1)//2`, kept canonical by [`Poly::floor_div`]),
/// the floor of a polynomial divided by a symbolic one (`s0//(s0//2)`, a size tracing could not
/// simplify), or the largest or smallest of two or more polynomials (a stride after an empty
/// dimension: `max(1, s0)`; see [`Poly::extreme`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Factor {
    Symbol(String),
    Floor(Box<Poly>, i64),
    Quotient(Box<Poly>, Box<Poly>),
    Max(Vec<Poly>),
    Min(Vec<Poly>),
}

/// A polynomial with integer coefficients over factors: monomial (its factors, sorted,
/// repeated for powers) → coefficient, without zero coefficients.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Poly(BTreeMap<Vec<Factor>, i64>);

impl Poly {
    pub fn constant(c: i64) -> Poly {
        let mut terms = BTreeMap::new();
        if c != 0 {
            terms.insert(Vec::new(), c);
        }
        Poly(terms)
    }

    pub fn symbol(name: &str) -> Poly {
        Poly::of_factor(Factor::Symbol(name.to_string()))
    }

    /// The polynomial that is `factor` alone.
    fn of_factor(factor: Factor) -> Poly {
        Poly(BTreeMap::from([(vec![factor], 1)]))
    }

    /// The factor, if the polynomial is one factor alone (coefficient 1).
    fn as_factor(&self) -> Option<&Factor> {
        match self.0.iter().next() {
            Some((monomial, 1)) if self.0.len() == 1 && monomial.len() == 1 => monomial.first(),
            _ => None,
        }
    }

    /// The constant value, if the polynomial has no symbol.
    pub fn as_constant(&self) -> Option<i64> {
        match self.0.len() {
            0 => Some(0),
            1 => self.0.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    /// The symbol, if the polynomial is exactly one symbol.
    pub fn as_symbol(&self) -> Option<&str> {
        self.as_scaled_symbol()
            .and_then(|(symbol, c)| (c == 1).then_some(symbol))
    }

    /// The symbol and its coefficient, if the polynomial is one symbol times a constant
    /// (`2*s0`).
    pub fn as_scaled_symbol(&self) -> Option<(&str, i64)> {
        match self.0.iter().next() {
            Some((monomial, &c)) if self.0.len() == 1 => match monomial.as_slice() {
                [Factor::Symbol(name)] => Some((name.as_str(), c)),
                _ => None,
            },
            _ => None,
        }
    }

    /// The symbols it uses, inside floor divisions too.
    pub fn symbols(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        for factor in self.0.keys().flatten() {
            match factor {
                Factor::Symbol(name) => {
                    out.insert(name.as_str());
                }
                Factor::Floor(inner, _) => out.extend(inner.symbols()),
                Factor::Quotient(a, b) => out.extend(a.symbols().into_iter().chain(b.symbols())),
                Factor::Max(args) | Factor::Min(args) => {
                    out.extend(args.iter().flat_map(Poly::symbols));
                }
            }
        }
        out
    }

    /// Its terms: each monomial's factors and coefficient.
    pub fn terms(&self) -> impl Iterator<Item = (&[Factor], i64)> {
        self.0.iter().map(|(m, &c)| (m.as_slice(), c))
    }

    pub fn add(&self, other: &Poly) -> Result<Poly> {
        let mut terms = self.0.clone();
        for (monomial, &c) in &other.0 {
            let entry = terms.entry(monomial.clone()).or_insert(0);
            *entry = entry.checked_add(c).ok_or_else(overflow)?;
        }
        terms.retain(|_, c| *c != 0);
        Ok(Poly(terms))
    }

    pub fn mul(&self, other: &Poly) -> Result<Poly> {
        let mut out = Poly::default();
        for (a, &ca) in &self.0 {
            for (b, &cb) in &other.0 {
                let mut monomial: Vec<Factor> = a.iter().chain(b).cloned().collect();
                monomial.sort();
                let term = Poly(BTreeMap::from([(
                    monomial,
                    ca.checked_mul(cb).ok_or_else(overflow)?,
                )]));
                out = out.add(&term)?;
            }
        }
        Ok(out)
    }

    /// `floor(self / divisor)` for a divisor above 0, canonical: the terms whose coefficients
    /// `divisor` divides leave the floor (`(2*s0 + s1)//2` is `s0 + (s1//2)`), the rest is
    /// divided by its coefficients' common divisor with `divisor`, and a floor of a floor
    /// is one floor.
    pub fn floor_div(&self, divisor: i64) -> Result<Poly> {
        if divisor <= 0 {
            return Err(Error::InvalidGraph(format!(
                "a symbolic size divides by {divisor}; only positive divisors are supported"
            )));
        }
        let mut quotient = Poly::default();
        let mut rest = Poly::default();
        for (monomial, &c) in &self.0 {
            for (part, coefficient) in [
                (&mut quotient, c.div_euclid(divisor)),
                (&mut rest, c.rem_euclid(divisor)),
            ] {
                if coefficient != 0 {
                    part.0.insert(monomial.clone(), coefficient);
                }
            }
        }
        let common = rest.0.values().fold(divisor, |g, &c| gcd(g, c));
        let divisor = divisor / common;
        let rest = Poly(rest.0.into_iter().map(|(m, c)| (m, c / common)).collect());
        let floor = match (rest.as_constant(), rest.as_factor()) {
            // The coefficients of `rest` lie in 0..divisor, so a constant one floors to 0.
            (Some(_), _) => Poly::default(),
            _ if divisor == 1 => rest,
            (None, Some(Factor::Floor(inner, d))) => {
                inner.floor_div(d.checked_mul(divisor).ok_or_else(overflow)?)?
            }
            _ => Poly::of_factor(Factor::Floor(Box::new(rest), divisor)),
        };
        quotient.add(&floor)
    }

    /// `floor(self / divisor)`: [`Self::floor_div`] for a constant divisor, else a quotient
    /// (1 when both are equal).
    pub fn quotient(&self, divisor: &Poly) -> Result<Poly> {
        match divisor.as_constant() {
            Some(d) => self.floor_div(d),
            None if self == divisor => Ok(Poly::constant(1)),
            None => Ok(Poly::of_factor(Factor::Quotient(
                Box::new(self.clone()),
                Box::new(divisor.clone()),
            ))),
        }
    }

    /// The largest (`largest`) or smallest of `args`, canonical: nested extremes of the same
    /// kind flattened, the constants folded into one, the rest sorted and without repeats.
    pub fn extreme(largest: bool, args: Vec<Poly>) -> Poly {
        let mut constant: Option<i64> = None;
        let mut rest = BTreeSet::new();
        for arg in args {
            let nested = match (arg.as_factor(), largest) {
                (Some(Factor::Max(inner)), true) | (Some(Factor::Min(inner)), false) => {
                    Some(inner.clone())
                }
                _ => None,
            };
            for arg in nested.unwrap_or_else(|| vec![arg]) {
                match (arg.as_constant(), constant) {
                    (Some(c), Some(k)) => {
                        constant = Some(if largest { c.max(k) } else { c.min(k) })
                    }
                    (Some(c), None) => constant = Some(c),
                    (None, _) => {
                        rest.insert(arg);
                    }
                }
            }
        }
        let mut args: Vec<Poly> = constant.map(Poly::constant).into_iter().collect();
        args.extend(rest);
        if args.len() == 1 {
            return args.remove(0);
        }
        Poly::of_factor(if largest {
            Factor::Max(args)
        } else {
            Factor::Min(args)
        })
    }

    /// The value under `bindings` (symbol → value); `None` if a symbol is unbound or it
    /// overflows.
    pub fn eval(&self, bindings: &HashMap<String, i64>) -> Option<i64> {
        self.0.iter().try_fold(0i64, |sum, (monomial, &c)| {
            let product = monomial.iter().try_fold(c, |p, factor| {
                let value = match factor {
                    Factor::Symbol(name) => *bindings.get(name)?,
                    Factor::Floor(inner, d) => inner.eval(bindings)?.checked_div_euclid(*d)?,
                    Factor::Quotient(a, b) => match b.eval(bindings)? {
                        d if d > 0 => a.eval(bindings)?.checked_div_euclid(d)?,
                        _ => return None,
                    },
                    Factor::Max(args) => args.iter().map(|a| a.eval(bindings)).max()??,
                    Factor::Min(args) => args.iter().map(|a| a.eval(bindings)).min()??,
                };
                p.checked_mul(value)
            })?;
            sum.checked_add(product)
        })
    }

    /// Parses `128*s0`, `s0*s1 + 2*s1 - 1`, `(s0 + 1)*s1`, `(s0 - 1)//2 + 1`, `max(1, s0)`:
    /// integers, symbols (a letter or `_` then letters, digits or `_`), `+`, `-`, `*`, `//` by
    /// a positive integer or a size (Python's floor division, as tight as `*`), `**` with an integer
    /// exponent, parentheses, `max(..)` and `min(..)` of two or more sizes.
    pub fn parse(text: &str) -> Result<Poly> {
        let mut parser = Parser {
            text,
            bytes: text.as_bytes(),
            at: 0,
        };
        let poly = parser.sum()?;
        parser.skip_space();
        if parser.at != parser.bytes.len() {
            return Err(parser.error("unexpected text"));
        }
        Ok(poly)
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    match b {
        0 => a.abs(),
        _ => gcd(b, a % b),
    }
}

fn overflow() -> Error {
    Error::InvalidGraph("a symbolic size overflows 64 bits".to_string())
}

impl fmt::Display for Poly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return write!(f, "0");
        }
        // Higher degrees first, the constant last: `s0*s1 + 2*s0 + 1`.
        let mut terms: Vec<(&Vec<Factor>, &i64)> = self.0.iter().collect();
        terms.sort_by(|(a, _), (b, _)| b.len().cmp(&a.len()).then(a.cmp(b)));
        for (i, (monomial, &c)) in terms.into_iter().enumerate() {
            let sign = if c < 0 { "-" } else { "+" };
            match (i, c < 0) {
                (0, true) => write!(f, "-")?,
                (0, false) => {}
                _ => write!(f, " {sign} ")?,
            }
            let magnitude = c.unsigned_abs();
            let mut factors: Vec<String> = Vec::new();
            if magnitude != 1 || monomial.is_empty() {
                factors.push(magnitude.to_string());
            }
            factors.extend(monomial.iter().map(Factor::to_string));
            write!(f, "{}", factors.join("*"))?;
        }
        Ok(())
    }
}

impl fmt::Display for Factor {
    /// A floor division is parenthesised whole, and its dividend unless that is one term with
    /// a positive coefficient (`(s0//2)`, `(3*s0*s1//4)`, `((s0 + 1)//2)`), so that the text
    /// parses back to the same factor wherever it stands.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Factor::Symbol(name) => write!(f, "{name}"),
            Factor::Floor(inner, d) => match inner.0.values().collect::<Vec<_>>().as_slice() {
                [c] if **c > 0 => write!(f, "({inner}//{d})"),
                _ => write!(f, "(({inner})//{d})"),
            },
            Factor::Quotient(a, b) => write!(f, "(({a})//({b}))"),
            Factor::Max(args) | Factor::Min(args) => {
                let name = if matches!(self, Factor::Max(_)) {
                    "max"
                } else {
                    "min"
                };
                let args: Vec<String> = args.iter().map(Poly::to_string).collect();
                write!(f, "{name}({})", args.join(", "))
            }
        }
    }
}

struct Parser<'t> {
    text: &'t str,
    bytes: &'t [u8],
    at: usize,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> Error {
        Error::InvalidGraph(format!(
            "symbolic size `{}`: {what} at offset {}",
            self.text, self.at
        ))
    }

    fn skip_space(&mut self) {
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.bytes.get(self.at).copied()
    }

    fn sum(&mut self) -> Result<Poly> {
        let mut total = match self.peek() {
            Some(b'-') => {
                self.at += 1;
                self.product()?.mul(&Poly::constant(-1))?
            }
            _ => self.product()?,
        };
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.at += 1;
            let term = self.product()?;
            let term = match op {
                b'-' => term.mul(&Poly::constant(-1))?,
                _ => term,
            };
            total = total.add(&term)?;
        }
        Ok(total)
    }

    fn product(&mut self) -> Result<Poly> {
        let mut total = self.power()?;
        loop {
            match (self.peek(), self.bytes.get(self.at + 1)) {
                (Some(b'*'), next) if next != Some(&b'*') => {
                    self.at += 1;
                    total = total.mul(&self.power()?)?;
                }
                (Some(b'/'), Some(b'/')) => {
                    self.at += 2;
                    let divisor = self.power()?;
                    if divisor.as_constant().is_some_and(|d| d <= 0) {
                        return Err(self.error("a divisor that is no positive integer"));
                    }
                    total = total.quotient(&divisor)?;
                }
                (Some(b'/'), _) => return Err(self.error("a true division (`/`)")),
                _ => return Ok(total),
            }
        }
    }

    fn power(&mut self) -> Result<Poly> {
        let base = self.atom()?;
        if self.peek() == Some(b'*') && self.bytes.get(self.at + 1) == Some(&b'*') {
            self.at += 2;
            self.skip_space();
            let exponent = self.integer()?;
            if !(0..=8).contains(&exponent) {
                return Err(self.error("an exponent outside 0..=8"));
            }
            let mut out = Poly::constant(1);
            for _ in 0..exponent {
                out = out.mul(&base)?;
            }
            return Ok(out);
        }
        Ok(base)
    }

    fn integer(&mut self) -> Result<i64> {
        let start = self.at;
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        self.text[start..self.at]
            .parse()
            .map_err(|_| self.error("expected an integer"))
    }

    fn atom(&mut self) -> Result<Poly> {
        match self.peek() {
            Some(b'(') => {
                self.at += 1;
                let inner = self.sum()?;
                if self.peek() != Some(b')') {
                    return Err(self.error("expected `)`"));
                }
                self.at += 1;
                Ok(inner)
            }
            Some(b) if b.is_ascii_digit() => Ok(Poly::constant(self.integer()?)),
            Some(b) if b.is_ascii_alphabetic() || b == b'_' => {
                let start = self.at;
                while self
                    .bytes
                    .get(self.at)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
                {
                    self.at += 1;
                }
                let name = &self.text[start..self.at];
                match name {
                    "max" | "min" if self.peek() == Some(b'(') => {
                        self.at += 1;
                        let mut args = vec![self.sum()?];
                        while self.peek() == Some(b',') {
                            self.at += 1;
                            args.push(self.sum()?);
                        }
                        if self.peek() != Some(b')') || args.len() < 2 {
                            return Err(self.error("expected `, size` or `)`"));
                        }
                        self.at += 1;
                        Ok(Poly::extreme(name == "max", args))
                    }
                    _ => Ok(Poly::symbol(name)),
                }
            }
            _ => Err(self.error("expected an integer, a symbol or `(`")),
        }
    }
}

/// Markers are at or below this value: far below any stride a tensor has.
const MARKER_BASE: i64 = -(1 << 40);

/// The size that stands for one too large to compute (a product that overflows); validation
/// rejects it.
pub const MAX_SIZE: i64 = i64::MAX;

/// The process-wide table of the polynomials markers name.
struct Table {
    polys: Vec<Poly>,
    markers: HashMap<Poly, i64>,
}

fn table() -> std::sync::MutexGuard<'static, Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            Mutex::new(Table {
                polys: Vec::new(),
                markers: HashMap::new(),
            })
        })
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// The size `poly` stands for: its value when it is constant, else its marker.
pub fn size_of(poly: Poly) -> i64 {
    if let Some(c) = poly.as_constant() {
        return c;
    }
    let mut table = table();
    if let Some(&marker) = table.markers.get(&poly) {
        return marker;
    }
    let marker = MARKER_BASE - table.polys.len() as i64;
    table.polys.push(poly.clone());
    table.markers.insert(poly, marker);
    marker
}

/// Whether `size` is a marker (a symbolic size).
pub fn is_symbolic(size: i64) -> bool {
    size <= MARKER_BASE
}

/// The polynomial of a size: a marker's, or the constant.
pub fn poly_of(size: i64) -> Poly {
    if !is_symbolic(size) {
        return Poly::constant(size);
    }
    let index = (MARKER_BASE - size) as usize;
    table().polys.get(index).cloned().unwrap_or_default()
}

/// The product of sizes (markers included), as a size.
pub fn product(sizes: &[i64]) -> Result<i64> {
    let mut out = Poly::constant(1);
    for &s in sizes {
        out = out.mul(&poly_of(s))?;
    }
    Ok(size_of(out))
}

/// The sum of two sizes (markers included), as a size.
pub fn sum(a: i64, b: i64) -> Result<i64> {
    Ok(size_of(poly_of(a).add(&poly_of(b))?))
}

/// The floor of a size (markers included) divided by a positive constant, as a size: a
/// strided or pooled output size, `(s0 + 2*1 - 3)//2 + 1`.
pub fn floor_div(size: i64, divisor: i64) -> Result<i64> {
    Ok(size_of(poly_of(size).floor_div(divisor)?))
}

/// The larger of two sizes (markers included), as a size.
pub fn larger(a: i64, b: i64) -> i64 {
    size_of(Poly::extreme(true, vec![poly_of(a), poly_of(b)]))
}

/// Whether a tensor of `sizes` holds no element for any value of its symbols (a fixed size
/// of 0).
pub fn is_empty(sizes: &[i64]) -> Result<bool> {
    Ok(poly_of(product(sizes)?).as_constant() == Some(0))
}

/// Whether sizes `a` and `b` can be equal: equal polynomials, or ones whose difference holds
/// a floor division, a maximum or a minimum, which only the symbols' values decide (a view of
/// `[s0, s1, 4]` as `[4, 3, (s0*s1//3)]` holds where 3 divides `s0*s1`, which the graph's
/// tracing guards).
pub fn may_be_equal(a: i64, b: i64) -> bool {
    let d = poly_of(b)
        .mul(&Poly::constant(-1))
        .and_then(|negated| poly_of(a).add(&negated));
    d.is_ok_and(|d| {
        d.as_constant() == Some(0)
            || d.terms()
                .any(|(m, _)| m.iter().any(|f| !matches!(f, Factor::Symbol(_))))
    })
}

/// Sizes as a message shows them: `[s0, (s1//2), 64]`.
pub fn shown(sizes: &[i64]) -> String {
    let items: Vec<String> = sizes.iter().map(|&d| poly_of(d).to_string()).collect();
    format!("[{}]", items.join(", "))
}

/// The difference `a - b` of two sizes (markers included), as a size.
pub fn difference(a: i64, b: i64) -> Result<i64> {
    Ok(size_of(
        poly_of(a).add(&poly_of(b).mul(&Poly::constant(-1))?)?,
    ))
}

/// A size as the interchange writes it: an integer, or a polynomial's text.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Written {
    Int(i64),
    Text(String),
}

fn read(w: Written) -> Result<i64> {
    match w {
        Written::Int(v) => Ok(v),
        Written::Text(text) => Ok(size_of(Poly::parse(&text)?)),
    }
}

fn written(size: i64) -> Written {
    match is_symbolic(size) {
        true => Written::Text(poly_of(size).to_string()),
        false => Written::Int(size),
    }
}

/// Serde for a list of sizes (a shape, strides, an int list argument).
pub mod list {
    use super::*;

    pub fn serialize<S: Serializer>(sizes: &[i64], s: S) -> std::result::Result<S::Ok, S::Error> {
        sizes
            .iter()
            .map(|&d| written(d))
            .collect::<Vec<_>>()
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<i64>, D::Error> {
        Vec::<Written>::deserialize(d)?
            .into_iter()
            .map(|w| read(w).map_err(serde::de::Error::custom))
            .collect()
    }
}

/// Serde for one size (an int argument).
pub mod one {
    use super::*;

    pub fn serialize<S: Serializer>(size: &i64, s: S) -> std::result::Result<S::Ok, S::Error> {
        written(*size).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<i64, D::Error> {
        read(Written::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prints_and_evaluates() {
        let p = Poly::parse("(s0 + 1)*s1 - 2*s1 + 3**2").unwrap();
        assert_eq!(p.to_string(), "s0*s1 - s1 + 9");
        let bindings = HashMap::from([("s0".to_string(), 4), ("s1".to_string(), 5)]);
        assert_eq!(p.eval(&bindings), Some(24));
        assert_eq!(Poly::parse("s0**2").unwrap().to_string(), "s0*s0");
        assert_eq!(Poly::parse("s0").unwrap().as_symbol(), Some("s0"));
        assert!(Poly::parse("s0 / 2").is_err());
        assert!(Poly::parse("s0 // -2").is_err());
        assert!(Poly::parse("s0 // 0").is_err());
        assert!(Poly::parse("s0 +").is_err());
    }

    #[test]
    fn floor_divisions_are_canonical_and_print_back() {
        let canonical = |text: &str| Poly::parse(text).unwrap().to_string();
        // A pooled size: (s0 + 2*1 - 3)//2 + 1.
        assert_eq!(canonical("(s0 + 2 - 3)//2 + 1"), "((s0 + 1)//2)");
        assert_eq!(canonical("(2*s0 + s1)//2"), "s0 + (s1//2)");
        assert_eq!(canonical("(4*s0 + 2)//4"), "s0");
        assert_eq!(canonical("(6*s0 + 2*s1)//4"), "s0 + ((s0 + s1)//2)");
        assert_eq!(canonical("(s0//2)//3"), "(s0//6)");
        assert_eq!(canonical("6*s0//3"), "2*s0");
        assert_eq!(canonical("7//2 + s0*0"), "3");
        assert_eq!(canonical("3*s0*s1//4*2"), "2*(3*s0*s1//4)");
        assert_eq!(canonical("(1 - s0)//2"), "-s0 + ((s0 + 1)//2)");
        for text in [
            "(s0 - 1)//2 + 1",
            "((s0 + 1)//2 - 3)//5 * s1",
            "(1 - s0)//2",
            "s0*s1//4 - s1//3",
        ] {
            let p = Poly::parse(text).unwrap();
            assert_eq!(Poly::parse(&p.to_string()).unwrap(), p, "{text} -> {p}");
            for (s0, s1) in [(0, 0), (1, 7), (2, 3), (5, 1), (64, 9), (97, 13)] {
                let bindings = HashMap::from([("s0".to_string(), s0), ("s1".to_string(), s1)]);
                let python = |text: &str| {
                    // The same expression evaluated with floor division by hand.
                    let f = |a: i64, b: i64| a.div_euclid(b);
                    match text {
                        "(s0 - 1)//2 + 1" => f(s0 - 1, 2) + 1,
                        "((s0 + 1)//2 - 3)//5 * s1" => f(f(s0 + 1, 2) - 3, 5) * s1,
                        "(1 - s0)//2" => f(1 - s0, 2),
                        _ => f(s0 * s1, 4) - f(s1, 3),
                    }
                };
                assert_eq!(
                    p.eval(&bindings),
                    Some(python(text)),
                    "{text} at {s0}, {s1}"
                );
            }
        }
        assert_eq!(
            canonical("max(1, s0//2, max(3, s1), 2)"),
            "max(3, s1, (s0//2))"
        );
        assert_eq!(canonical("min(s0, 4, s0) + max(2, 5)"), "min(4, s0) + 5");
        let m = Poly::parse("max(1, (s0 + 1)//2)*s1").unwrap();
        assert_eq!(Poly::parse(&m.to_string()).unwrap(), m);
        let bindings = HashMap::from([("s0".to_string(), 0), ("s1".to_string(), 3)]);
        assert_eq!(m.eval(&bindings), Some(3));
        assert!(Poly::parse("max(s0)").is_err());
        let q = Poly::parse("s0//(s0//2) + s1//s1").unwrap();
        assert_eq!(q.to_string(), "((s0)//((s0//2))) + 1");
        assert_eq!(Poly::parse(&q.to_string()).unwrap(), q);
        let bindings = HashMap::from([("s0".to_string(), 9), ("s1".to_string(), 3)]);
        assert_eq!(q.eval(&bindings), Some(3));
        let bindings = HashMap::from([("s0".to_string(), 1), ("s1".to_string(), 3)]);
        assert_eq!(q.eval(&bindings), None, "a division by zero has no value");
        let nested = Poly::parse("(s0 + s1//2)//3").unwrap();
        assert_eq!(
            nested.symbols().into_iter().collect::<Vec<_>>(),
            ["s0", "s1"]
        );
    }

    #[test]
    fn markers_name_equal_polynomials_once() {
        let a = size_of(Poly::parse("128*s0").unwrap());
        let b = size_of(Poly::parse("s0*128").unwrap());
        assert_eq!(a, b);
        assert!(is_symbolic(a));
        assert_eq!(size_of(Poly::parse("2*3").unwrap()), 6);
        let s0 = size_of(Poly::symbol("s0"));
        assert_eq!(product(&[s0, 128]).unwrap(), a);
        assert_eq!(poly_of(a).to_string(), "128*s0");
    }

    #[test]
    fn symbolic_contiguous_strides_count_an_empty_dimension_as_one() {
        let s0 = size_of(Poly::symbol("s0"));
        let strides = crate::graph::contiguous_strides(&[2, 0, s0]);
        // PyTorch's strides of a contiguous 2 x 0 x s0 tensor: (s0, s0, 1).
        assert_eq!(strides, vec![s0, s0, 1]);
    }
}
