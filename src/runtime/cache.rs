//! The compile cache: kernels by key, in memory for the life of the process and as object files
//! (one per part of a kernel compiled in parallel) on disk for later processes. The key covers everything that determines the machine code —
//! the graph's structure (not its names or source lines), fxmlir's version and sources, the
//! code-affecting options, the LLVM version and the host CPU — so an entry is never stale, only
//! unused. A disk entry that cannot be read or linked is reported and recompiled; a directory
//! that cannot be written is reported once and the process compiles without storing.
//!
//! A directory's entries are bounded in size (`FXMLIR_CACHE_MAX_MB`, default
//! [`DEFAULT_MAX_MB`]): after each store the least recently used entries (by modification
//! time, which a load renews) are deleted until the rest fit.

use super::Options;
use crate::error::{Error, Result};
use crate::graph::{Arg, Graph, TensorMeta, ValueRef};
use crate::jit::{self, Kernel};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::SystemTime;

/// Version of the entry layout; part of the key, so a change makes old entries unused.
const FORMAT: u32 = 2;

/// The bound, in MiB, of a cache directory's entries when `FXMLIR_CACHE_MAX_MB` is unset: a few
/// thousand kernels of typical models (an entry is 0.05-1 MB).
pub const DEFAULT_MAX_MB: f64 = 1024.0;

/// The bound in bytes on a cache directory's entries: `FXMLIR_CACHE_MAX_MB` (a non-negative
/// number of MiB, fractions allowed) or [`DEFAULT_MAX_MB`]. An unusable value is reported
/// once and the default applies.
fn max_bytes(warnings: &mut Vec<String>) -> u64 {
    static MAX: LazyLock<std::result::Result<f64, String>> =
        LazyLock::new(|| match std::env::var("FXMLIR_CACHE_MAX_MB") {
            Err(_) => Ok(DEFAULT_MAX_MB),
            Ok(text) => text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|mb| mb.is_finite() && *mb >= 0.0)
                .ok_or(text),
        });
    static REPORTED: AtomicBool = AtomicBool::new(false);
    let mb = match &*MAX {
        Ok(mb) => *mb,
        Err(text) => {
            if !REPORTED.swap(true, Ordering::Relaxed) {
                warn(
                    warnings,
                    format!(
                        "FXMLIR_CACHE_MAX_MB={text:?} is not a number of MiB; using {DEFAULT_MAX_MB}"
                    ),
                );
            }
            DEFAULT_MAX_MB
        }
    };
    (mb * (1u64 << 20) as f64) as u64
}

/// The identity of a kernel: `text` lists what it depends on, one item per line; `digest` is
/// its SHA-256, which names the disk entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub text: String,
    pub digest: String,
}

impl Key {
    pub fn new(graph: &Graph, options: &Options) -> Result<Key> {
        let (major, minor, patch) = inkwell::support::get_llvm_version();
        let text = format!(
            "fxmlir-kernel {FORMAT}\n\
             fxmlir {} {}\n\
             graph {}\n\
             options {}\n\
             llvm {major}.{minor}.{patch} {}\n\
             target {}\n",
            env!("CARGO_PKG_VERSION"),
            env!("FXMLIR_SOURCE_HASH"),
            structural_hash(graph)?,
            options.fingerprint(),
            crate::context::llvm_args(),
            options.target.fingerprint(),
        );
        let digest = hex(&Sha256::digest(text.as_bytes()));
        Ok(Key { text, digest })
    }
}

/// A hash of what a graph computes: its inputs', constants' and nodes' metadata, ops and
/// arguments and its outputs, with every value named by position (`i0`, `c1`, `n2`) so that
/// the graph's name, node names, argument names and source lines do not count.
pub fn structural_hash(graph: &Graph) -> Result<String> {
    /// A node: its op, arguments, outputs and the MLIR of a lowering given with it.
    type CanonicalNode<'g> = (&'g str, Vec<Arg>, &'g [TensorMeta], Option<&'g str>);

    #[derive(Serialize)]
    struct Canonical<'g> {
        version: u32,
        inputs: Vec<&'g TensorMeta>,
        constants: Vec<(&'g TensorMeta, &'g str)>,
        nodes: Vec<CanonicalNode<'g>>,
        outputs: Vec<ValueRef>,
    }
    let mut positions: HashMap<&str, String> = HashMap::new();
    let names = graph
        .inputs
        .iter()
        .map(|i| ("i", i.name.as_str()))
        .enumerate()
        .chain(
            graph
                .constants
                .iter()
                .map(|c| ("c", c.name.as_str()))
                .enumerate(),
        )
        .chain(
            graph
                .nodes
                .iter()
                .map(|n| ("n", n.name.as_str()))
                .enumerate(),
        );
    for (i, (prefix, name)) in names {
        positions.insert(name, format!("{prefix}{i}"));
    }
    let position = |r: &ValueRef| -> Result<ValueRef> {
        let node = positions
            .get(r.node.as_str())
            .ok_or_else(|| Error::InvalidGraph(format!("`{}` is not defined", r.node)))?;
        Ok(ValueRef {
            node: node.clone(),
            index: r.index,
        })
    };
    fn canonical(arg: &Arg, position: &dyn Fn(&ValueRef) -> Result<ValueRef>) -> Result<Arg> {
        Ok(match arg {
            Arg::Ref(r) => Arg::Ref(position(r)?),
            Arg::List(items) => Arg::List(
                items
                    .iter()
                    .map(|a| canonical(a, position))
                    .collect::<Result<_>>()?,
            ),
            other => other.clone(),
        })
    }
    let form = Canonical {
        version: graph.version,
        inputs: graph.inputs.iter().map(|i| &i.meta).collect(),
        constants: graph
            .constants
            .iter()
            .map(|c| (&c.meta, c.data.as_str()))
            .collect(),
        nodes: graph
            .nodes
            .iter()
            .map(|n| {
                let args = n
                    .args
                    .iter()
                    .map(|a| canonical(a, &position))
                    .collect::<Result<_>>()?;
                // A lowering given with the node is part of what it computes (its origin
                // only names it).
                let lowering = n.lowering.as_ref().map(|l| l.mlir.as_str());
                Ok((n.target.as_str(), args, n.outputs.as_slice(), lowering))
            })
            .collect::<Result<_>>()?,
        outputs: graph.outputs.iter().map(position).collect::<Result<_>>()?,
    };
    let mut hash = Sha256::new();
    serde_json::to_writer(&mut hash, &form)?;
    Ok(hex(&hash.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of `bytes` in hex: how the key names texts too long to list (an added stage's
/// script, a dialect).
pub fn hex_digest(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// How many kernels this process keeps in memory when `FXMLIR_MEMORY_CACHE_KERNELS` is unset.
pub const DEFAULT_MEMORY_KERNELS: usize = 512;

/// Kernels compiled or loaded by this process, by key, bounded by count
/// (`FXMLIR_MEMORY_CACHE_KERNELS`, default [`DEFAULT_MEMORY_KERNELS`]): inserting beyond the
/// bound drops the least recently used. A dropped kernel lives on while a compiled graph
/// holds it; a later compile of its graph loads it from disk or compiles it again.
struct Memory {
    kernels: HashMap<String, (Arc<Kernel>, u64)>,
    clock: u64,
    limit: usize,
}

impl Memory {
    fn get(&mut self, key: &str) -> Option<Arc<Kernel>> {
        self.clock += 1;
        let clock = self.clock;
        self.kernels.get_mut(key).map(|(kernel, used)| {
            *used = clock;
            kernel.clone()
        })
    }

    fn insert(&mut self, key: String, kernel: Arc<Kernel>) {
        self.clock += 1;
        self.kernels.insert(key, (kernel, self.clock));
        while self.kernels.len() > self.limit.max(1) {
            let oldest = self
                .kernels
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(key, _)| key.clone());
            match oldest {
                Some(key) => self.kernels.remove(&key),
                None => break,
            };
        }
    }
}

/// The bound on kernels kept in memory: `FXMLIR_MEMORY_CACHE_KERNELS` (a positive count), or
/// [`DEFAULT_MEMORY_KERNELS`] when it is unset or not one (reported on stderr's log).
fn memory_limit() -> usize {
    match std::env::var("FXMLIR_MEMORY_CACHE_KERNELS") {
        Err(_) => DEFAULT_MEMORY_KERNELS,
        Ok(text) => text
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or_else(|| {
                tracing::warn!(
                    "FXMLIR_MEMORY_CACHE_KERNELS={text:?} is not a positive count; keeping \
                 {DEFAULT_MEMORY_KERNELS} kernels"
                );
                DEFAULT_MEMORY_KERNELS
            }),
    }
}

static MEMORY: LazyLock<Mutex<Memory>> = LazyLock::new(|| {
    Mutex::new(Memory {
        kernels: HashMap::new(),
        clock: 0,
        limit: memory_limit(),
    })
});

/// How many kernels the memory cache holds now.
pub fn memory_len() -> usize {
    MEMORY
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .kernels
        .len()
}

/// Cache directories a store failed in; each is reported once and not written again.
static UNWRITABLE: LazyLock<Mutex<HashSet<PathBuf>>> = LazyLock::new(Default::default);

pub fn memory_lookup(key: &Key) -> Option<Arc<Kernel>> {
    MEMORY
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key.digest)
}

pub fn memory_insert(key: &Key, kernel: Arc<Kernel>) {
    MEMORY
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key.digest.clone(), kernel);
}

/// The directory of a cache directory's entries.
fn kernels_dir(dir: &Path) -> PathBuf {
    dir.join("kernels")
}

/// Where the entry of `key` lives under a cache directory.
pub fn entry_path(dir: &Path, key: &Key) -> PathBuf {
    kernels_dir(dir).join(format!("{}.kernel", key.digest))
}

/// Stores into a cache directory after which this process reads its entries' sizes again
/// although its own count stays within the bound (other processes may store there too).
const RESCAN_STORES: u32 = 64;

/// What this process knows of a cache directory's size: the bytes its entries took at the last
/// scan plus those it stored since, and how many stores that was.
#[derive(Clone, Copy)]
struct Tally {
    bytes: u64,
    stores: u32,
}

/// Per cache directory (its `kernels` directory), the [`Tally`] since this process last read
/// the sizes of its entries.
static TALLIES: LazyLock<Mutex<HashMap<PathBuf, Tally>>> = LazyLock::new(Default::default);

/// Whether a store of `bytes` into `kernels` must read the entries' sizes (and evict): on the
/// first store of this process there, when its count exceeds `limit`, and every
/// [`RESCAN_STORES`] stores. Reading every entry's metadata on every store made a long session's
/// stores quadratic in the number of entries (a full test run: about a tenth of its time).
fn needs_scan(kernels: &Path, bytes: u64, limit: u64) -> bool {
    let mut tallies = TALLIES.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(tally) = tallies.get_mut(kernels) else {
        return true;
    };
    tally.bytes = tally.bytes.saturating_add(bytes);
    tally.stores += 1;
    tally.bytes > limit || tally.stores >= RESCAN_STORES
}

/// Deletes the least recently modified entries (`*.kernel`) in `kernels`, never `keep`, until
/// the entries take at most `limit` bytes; returns how many it deleted, and records the bytes
/// left as the directory's [`Tally`]. An entry another process deleted meanwhile counts as
/// deleted.
fn evict(kernels: &Path, keep: &Path, limit: u64) -> std::io::Result<usize> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(kernels)? {
        let entry = entry?;
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "kernel") {
            continue;
        }
        let metadata = match entry.metadata() {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        entries.push((metadata.modified()?, metadata.len(), path));
    }
    let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
    entries.sort();
    let mut deleted = 0;
    for (_, len, path) in entries {
        if total <= limit {
            break;
        }
        if path == keep {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => deleted += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        total -= len;
    }
    TALLIES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(
            kernels.to_path_buf(),
            Tally {
                bytes: total,
                stores: 0,
            },
        );
    Ok(deleted)
}

/// The kernel stored under `dir` for `key`, linked. `None` when there is no entry, or (with a
/// warning in `warnings`) when the entry cannot be read, is not this key's, is damaged or
/// does not link.
pub fn disk_lookup(dir: &Path, key: &Key, warnings: &mut Vec<String>) -> Option<Kernel> {
    let path = entry_path(dir, key);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        // No entry, or no directory to hold one (the store reports that).
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return None;
        }
        Err(e) => {
            warn(warnings, unusable(&path, &e.to_string()));
            return None;
        }
    };
    let loaded =
        decode(key, &bytes).and_then(|objects| jit::load(&objects).map_err(|e| e.to_string()));
    match loaded {
        Ok(kernel) => {
            // Marks the entry used for eviction; a read-only cache simply keeps its times.
            let _ = std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(SystemTime::now()));
            Some(kernel)
        }
        Err(reason) => {
            warn(warnings, unusable(&path, &reason));
            None
        }
    }
}

fn unusable(path: &Path, reason: &str) -> String {
    format!(
        "ignoring the compile cache entry {} ({reason}); recompiling and overwriting it",
        path.display()
    )
}

/// Writes `objects` as the entry of `key` under `dir`, atomically (a temporary file renamed into
/// place), so that a concurrent reader sees the old entry, the new one, or none. A failure is
/// reported (once per directory) in `warnings`.
pub fn store(dir: &Path, key: &Key, objects: &[Vec<u8>], warnings: &mut Vec<String>) {
    if UNWRITABLE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(dir)
    {
        return;
    }
    static TEMPORARY: AtomicU64 = AtomicU64::new(0);
    let path = entry_path(dir, key);
    let temporary = path.with_extension(format!(
        "{}.{}.tmp",
        std::process::id(),
        TEMPORARY.fetch_add(1, Ordering::Relaxed)
    ));
    let entry = encode(key, objects);
    let written = (|| {
        std::fs::create_dir_all(path.parent().unwrap_or(dir))?;
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(&entry)?;
        drop(file);
        std::fs::rename(&temporary, &path)
    })();
    let (kernels, limit) = (kernels_dir(dir), max_bytes(warnings));
    if written.is_ok() && needs_scan(&kernels, entry.len() as u64, limit) {
        match evict(&kernels, &path, limit) {
            Ok(0) => {}
            Ok(n) => tracing::debug!(entries = n, "compile cache: least recently used evicted"),
            Err(e) => warn(
                warnings,
                format!(
                    "cannot evict old entries of the compile cache under {} ({e})",
                    dir.display()
                ),
            ),
        }
    }
    if let Err(e) = written {
        // Nothing to clean up when the temporary file was never created.
        let _ = std::fs::remove_file(&temporary);
        let first = UNWRITABLE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(dir.to_path_buf());
        if first {
            warn(
                warnings,
                format!(
                    "cannot write the compile cache under {} ({e}); compiling without it",
                    dir.display()
                ),
            );
        }
    }
}

fn warn(warnings: &mut Vec<String>, message: String) {
    tracing::warn!("{message}");
    warnings.push(message);
}

/// An entry: the key's text (so that `head` shows what an entry is, and a loader checks it is
/// the right one), `objects <count>`, one `object <length> <sha256>` line per object, an empty
/// line, then the object files one after the other.
fn encode(key: &Key, objects: &[Vec<u8>]) -> Vec<u8> {
    let mut header = format!("{}objects {}\n", key.text, objects.len());
    for object in objects {
        header.push_str(&format!(
            "object {} {}\n",
            object.len(),
            hex(&Sha256::digest(object))
        ));
    }
    header.push('\n');
    let mut bytes = header.into_bytes();
    for object in objects {
        bytes.extend_from_slice(object);
    }
    bytes
}

/// The objects in an entry of `key`, each checked against its length and checksum.
fn decode<'e>(key: &Key, entry: &'e [u8]) -> std::result::Result<Vec<&'e [u8]>, String> {
    let mut rest = entry
        .strip_prefix(key.text.as_bytes())
        .ok_or("its header is not this kernel's key")?;
    let mut line = || -> std::result::Result<&'e str, String> {
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("its header is cut short")?;
        let line = std::str::from_utf8(&rest[..end]).map_err(|_| "its header is not text")?;
        rest = &rest[end + 1..];
        Ok(line)
    };
    let count = line()?
        .strip_prefix("objects ")
        .and_then(|n| n.parse::<usize>().ok())
        .ok_or("its header has no object count")?;
    let mut sizes = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let (length, checksum) = line()?
            .strip_prefix("object ")
            .and_then(|l| l.split_once(' '))
            .and_then(|(n, sum)| Some((n.parse::<usize>().ok()?, sum)))
            .ok_or("its header has a malformed object line")?;
        sizes.push((length, checksum));
    }
    if !line()?.is_empty() {
        return Err("its header is not terminated".to_string());
    }
    let expected = sizes
        .iter()
        .try_fold(0usize, |sum, (n, _)| sum.checked_add(*n))
        .ok_or("its header's object lengths overflow")?;
    if expected != rest.len() {
        return Err(format!(
            "its objects have {} bytes, the header says {expected}",
            rest.len()
        ));
    }
    let mut objects = Vec::with_capacity(sizes.len());
    for (length, checksum) in sizes {
        let (object, tail) = rest.split_at(length);
        if hex(&Sha256::digest(object)) != checksum {
            return Err("an object does not match its checksum".to_string());
        }
        objects.push(object);
        rest = tail;
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key {
            text: "fxmlir-kernel 1\ngraph abc\n".to_string(),
            digest: "0".repeat(64),
        }
    }

    #[test]
    fn eviction_deletes_least_recently_used_first() {
        let dir = std::env::temp_dir().join(format!("fxmlir-evict-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let now = SystemTime::now();
        // Entries a, b, c, d of 100 bytes each, oldest first, and a temporary file (no entry).
        let names = ["a", "b", "c", "d"];
        for (age, name) in names.iter().enumerate() {
            let path = dir.join(format!("{name}.kernel"));
            std::fs::write(&path, [0u8; 100]).unwrap();
            let when = now - std::time::Duration::from_secs(100 - age as u64 * 10);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(when)
                .unwrap();
        }
        std::fs::write(dir.join("x.123.tmp"), [0u8; 1000]).unwrap();
        let keep = dir.join("a.kernel");
        assert_eq!(evict(&dir, &keep, 400).unwrap(), 0);
        // 400 bytes down to 200: b and c go (a is kept although oldest).
        assert_eq!(evict(&dir, &keep, 250).unwrap(), 2);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["a.kernel", "d.kernel", "x.123.tmp"]);
        assert_eq!(evict(&dir, &keep, 0).unwrap(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stores_scan_the_directory_first_then_when_the_count_says_so() {
        let dir = std::env::temp_dir().join(format!("fxmlir-tally-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.kernel"), [0u8; 100]).unwrap();
        // Never scanned in this process: the first store scans (100 bytes there).
        assert!(needs_scan(&dir, 10, 1000));
        assert_eq!(evict(&dir, &dir.join("a.kernel"), 1000).unwrap(), 0);
        // 100 + 10 per store: within the bound until the 63rd store's 730 bytes.
        for _ in 1..RESCAN_STORES {
            assert!(!needs_scan(&dir, 10, 1000));
        }
        // The 64th store rescans although 740 bytes are within the bound.
        assert!(needs_scan(&dir, 10, 1000));
        assert_eq!(evict(&dir, &dir.join("a.kernel"), 1000).unwrap(), 0);
        // Over the bound by this process's own count: scan.
        assert!(needs_scan(&dir, 950, 1000));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn entries_round_trip() {
        let objects = vec![
            b"\x7fELF\n\nbytes".to_vec(),
            Vec::new(),
            b"\x7fELF two".to_vec(),
        ];
        let expected: Vec<&[u8]> = objects.iter().map(Vec::as_slice).collect();
        assert_eq!(decode(&key(), &encode(&key(), &objects)), Ok(expected));
    }

    #[test]
    fn damaged_entries_are_rejected() {
        let entry = encode(&key(), &[b"object bytes".to_vec()]);
        let mut flipped = entry.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(
            decode(&key(), &flipped),
            Err("an object does not match its checksum".to_string())
        );
        assert!(
            decode(&key(), &entry[..entry.len() - 1])
                .unwrap_err()
                .contains("11 bytes, the header says 12")
        );
        let other = Key {
            text: "fxmlir-kernel 1\ngraph abd\n".to_string(),
            ..key()
        };
        assert_eq!(
            decode(&other, &entry),
            Err("its header is not this kernel's key".to_string())
        );
        assert!(decode(&key(), b"").is_err());
        let old = [key().text.as_bytes(), b"object 3 abc\n\nabc"].concat();
        assert!(decode(&key(), &old).is_err());
    }
}
