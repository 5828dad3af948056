//! Symbolic sizes. In a graph compiled for every size Dynamo's guards accept, a dimension or
//! stride may be a polynomial over the graph's size symbols (`s0`, `128*s0`, `s0*s1 + 1`),
//! written as text in the interchange document.
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
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Mutex, OnceLock, PoisonError};

/// A polynomial with integer coefficients over named symbols: monomial (its symbols, sorted,
/// repeated for powers) → coefficient, without zero coefficients.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Poly(BTreeMap<Vec<String>, i64>);

impl Poly {
    pub fn constant(c: i64) -> Poly {
        let mut terms = BTreeMap::new();
        if c != 0 {
            terms.insert(Vec::new(), c);
        }
        Poly(terms)
    }

    pub fn symbol(name: &str) -> Poly {
        Poly(BTreeMap::from([(vec![name.to_string()], 1)]))
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
            Some((monomial, &c)) if self.0.len() == 1 && monomial.len() == 1 => {
                Some((monomial[0].as_str(), c))
            }
            _ => None,
        }
    }

    /// The symbols it uses.
    pub fn symbols(&self) -> impl Iterator<Item = &str> {
        self.0.keys().flatten().map(String::as_str)
    }

    /// Its terms: each monomial's symbols and coefficient.
    pub fn terms(&self) -> impl Iterator<Item = (&[String], i64)> {
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
                let mut monomial: Vec<String> = a.iter().chain(b).cloned().collect();
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

    /// The value under `bindings` (symbol → value); `None` if a symbol is unbound or it
    /// overflows.
    pub fn eval(&self, bindings: &HashMap<String, i64>) -> Option<i64> {
        self.0.iter().try_fold(0i64, |sum, (monomial, &c)| {
            let product = monomial
                .iter()
                .try_fold(c, |p, s| p.checked_mul(*bindings.get(s)?))?;
            sum.checked_add(product)
        })
    }

    /// Parses `128*s0`, `s0*s1 + 2*s1 - 1`, `(s0 + 1)*s1`: integers, symbols (a letter or `_`
    /// then letters, digits or `_`), `+`, `-`, `*`, `**` with an integer exponent, parentheses.
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

fn overflow() -> Error {
    Error::InvalidGraph("a symbolic size overflows 64 bits".to_string())
}

impl fmt::Display for Poly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return write!(f, "0");
        }
        // Higher degrees first, the constant last: `s0*s1 + 2*s0 + 1`.
        let mut terms: Vec<(&Vec<String>, &i64)> = self.0.iter().collect();
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
            factors.extend(monomial.iter().cloned());
            write!(f, "{}", factors.join("*"))?;
        }
        Ok(())
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
        while self.peek() == Some(b'*') && self.bytes.get(self.at + 1) != Some(&b'*') {
            self.at += 1;
            total = total.mul(&self.power()?)?;
        }
        Ok(total)
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
                Ok(Poly::symbol(&self.text[start..self.at]))
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
        assert!(Poly::parse("s0 // 2").is_err());
        assert!(Poly::parse("s0 +").is_err());
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
