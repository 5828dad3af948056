//! The CPU a compile is for. A [`Target`] is a value: the lowering, the schedule and the JIT
//! take it as an argument and never look at the machine they run on. [`Target::host`] (the
//! default) is the one place that reads the host: LLVM's host CPU name and feature string, and
//! the level-2 cache size from Linux's sysfs. Any other target is spelled as a *spec*
//! ([`Target::parse`]): a base (`host`, a named CPU from `CPUS`, or a generic x86-64 level)
//! followed by comma-separated changes: `+feature`/`-feature`, `l2=<size>`, `threads=<n>`.
//!
//! ```text
//! znver4                      AMD Zen 4: AVX-512, AVX512-BF16, VNNI, 1 MiB L2
//! skylake-avx512,threads=2    Intel Skylake-SP, two threads
//! x86-64-v3,l2=512K           any AVX2 CPU, blocks sized for 512 KiB of L2
//! host,-avx512bf16            this machine without its bf16 dot product
//! ```
//!
//! Code for a target runs on the host only when the host has every instruction it may use
//! ([`Target::check_runs_here`]): targets derived from `host` by removing features, and the
//! generic levels, whose instruction sets are exactly their features.

use crate::error::{Error, Result};
use std::fmt;
use std::sync::OnceLock;

/// The instruction-set features fxmlir's decisions depend on, by their LLVM names. Each
/// entry lists the features it implies (LLVM's own implications, restricted to this list), so
/// that `+avx512bf16` brings AVX-512 with it and `-avx512f` takes AVX512-BF16 away.
const FEATURES: &[(&str, &[&str])] = &[
    ("sse4.2", &[]),
    ("avx", &["sse4.2"]),
    ("avx2", &["avx"]),
    ("fma", &["avx"]),
    ("f16c", &["avx"]),
    ("avx512f", &["avx2", "fma", "f16c"]),
    ("avx512cd", &["avx512f"]),
    ("avx512bw", &["avx512f"]),
    ("avx512dq", &["avx512f"]),
    ("avx512vl", &["avx512f"]),
    ("avx512vnni", &["avx512f"]),
    ("avx512bf16", &["avx512bw"]),
    ("avx512fp16", &["avx512bw", "avx512dq", "avx512vl"]),
];

const V2: &[&str] = &["sse4.2"];
const V3: &[&str] = &["sse4.2", "avx", "avx2", "fma", "f16c"];
const V4: &[&str] = &[
    "sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512cd", "avx512bw", "avx512dq",
    "avx512vl",
];

/// A named CPU: its LLVM name, the [`FEATURES`] it has (a generic level's and its own), and
/// one core's level-2 cache.
struct Cpu {
    name: &'static str,
    level: &'static [&'static str],
    extra: &'static [&'static str],
    l2_bytes: i64,
    /// A generic x86-64 level (`x86-64-v3`): its instruction set is exactly `features`, so its
    /// code runs on every host that has them.
    generic: bool,
}

/// The triple of named CPUs' code: fxmlir runs on x86-64 Linux (LLVM's default triple there).
const NAMED_TRIPLE: &str = "x86_64-pc-linux-gnu";

const KIB: i64 = 1 << 10;
const MIB: i64 = 1 << 20;

/// The level-2 cache assumed where nothing says otherwise (generic levels, a host whose kernel
/// does not tell): a 2 MiB server core's.
const DEFAULT_L2: i64 = 2 * MIB;

const fn cpu(
    name: &'static str,
    level: &'static [&'static str],
    extra: &'static [&'static str],
    l2_bytes: i64,
) -> Cpu {
    Cpu {
        name,
        level,
        extra,
        l2_bytes,
        generic: false,
    }
}

const fn level(name: &'static str, features: &'static [&'static str]) -> Cpu {
    Cpu {
        name,
        level: features,
        extra: &[],
        l2_bytes: DEFAULT_L2,
        generic: true,
    }
}

impl Cpu {
    /// Its features, in [`FEATURES`] order.
    fn features(&self) -> Vec<&'static str> {
        let mut features: Vec<&'static str> =
            self.level.iter().chain(self.extra).copied().collect();
        sort(&mut features);
        features
    }
}

const VNNI: &[&str] = &["avx512vnni"];
const VNNI_BF16: &[&str] = &["avx512vnni", "avx512bf16"];
const VNNI_BF16_FP16: &[&str] = &["avx512vnni", "avx512bf16", "avx512fp16"];

/// The CPUs a spec may name.
const CPUS: &[Cpu] = &[
    level("x86-64", &[]),
    level("x86-64-v2", V2),
    level("x86-64-v3", V3),
    level("x86-64-v4", V4),
    cpu("haswell", V3, &[], 256 * KIB),
    cpu("broadwell", V3, &[], 256 * KIB),
    cpu("skylake", V3, &[], 256 * KIB),
    cpu("alderlake", V3, &[], 1280 * KIB),
    cpu("skylake-avx512", V4, &[], MIB),
    cpu("cascadelake", V4, VNNI, MIB),
    cpu("cooperlake", V4, VNNI_BF16, MIB),
    cpu("icelake-server", V4, VNNI, 1280 * KIB),
    cpu("sapphirerapids", V4, VNNI_BF16_FP16, 2 * MIB),
    cpu("emeraldrapids", V4, VNNI_BF16_FP16, 2 * MIB),
    cpu("graniterapids", V4, VNNI_BF16_FP16, 2 * MIB),
    cpu("znver1", V3, &[], 512 * KIB),
    cpu("znver2", V3, &[], 512 * KIB),
    cpu("znver3", V3, &[], 512 * KIB),
    cpu("znver4", V4, VNNI_BF16, MIB),
    cpu("znver5", V4, VNNI_BF16, MIB),
];

/// The CPU a compile is for: what LLVM generates code for, the features the lowering and the
/// schedule choose by, the cache the blocks are sized for, and the threads kernels split
/// across.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// LLVM's target triple.
    pub triple: String,
    /// LLVM's CPU name (`target-cpu`).
    pub cpu: String,
    /// LLVM's feature string (`target-features`): the host's complete list for targets based
    /// on `host`, else the changes a spec made to its named CPU.
    pub llvm_features: String,
    /// Which of [`FEATURES`] the target has, in that list's order.
    features: Vec<&'static str>,
    /// Bytes of one core's level-2 cache, which the reduction and column blocks are sized for.
    pub l2_bytes: i64,
    /// Threads kernels split their large loops across (1: single-threaded).
    pub threads: usize,
    /// Whether the spec said `threads=`, which [`Target::with_default_threads`] then keeps.
    threads_fixed: bool,
    /// Based on the host's own feature list or on a generic level: its features tell every
    /// instruction its code may use.
    exact: bool,
    /// The spec this target was made from, normalised (see [`Target::spec`]).
    spec: String,
}

/// What [`Target::host`] read once.
struct Host {
    triple: String,
    cpu: String,
    llvm_features: String,
    l2_bytes: Option<i64>,
}

/// Initialises LLVM's native target (code generation for x86-64) once.
pub fn initialize_llvm() -> Result<()> {
    static INIT: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    INIT.get_or_init(|| {
        inkwell::targets::Target::initialize_native(
            &inkwell::targets::InitializationConfig::default(),
        )
    })
    .clone()
    .map_err(|e| Error::Llvm(format!("cannot initialise the native target: {e}")))?;
    // After the target's initialisation, so that its options are known to the parser.
    crate::context::command_line_options()
}

fn host_facts() -> Result<&'static Host> {
    static HOST: OnceLock<Host> = OnceLock::new();
    initialize_llvm()?;
    Ok(HOST.get_or_init(|| {
        use inkwell::targets::TargetMachine;
        Host {
            triple: TargetMachine::get_default_triple()
                .as_str()
                .to_string_lossy()
                .into_owned(),
            cpu: TargetMachine::get_host_cpu_name().to_string(),
            llvm_features: TargetMachine::get_host_cpu_features().to_string(),
            l2_bytes: sysfs_l2_bytes(),
        }
    }))
}

/// The level-2 cache of the first core as sysfs describes it (`512K`, `2048K`, `1M` or bytes).
fn sysfs_l2_bytes() -> Option<i64> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    std::fs::read_dir(dir).ok()?.flatten().find_map(|entry| {
        let read = |name: &str| std::fs::read_to_string(entry.path().join(name)).ok();
        if read("level")?.trim() != "2" || read("type")?.trim() == "Instruction" {
            return None;
        }
        parse_size(read("size")?.trim())
    })
}

/// Bytes in `512K`, `1M`, `1MiB`, `2048k` or `1048576`.
fn parse_size(text: &str) -> Option<i64> {
    let (digits, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => MIB,
        _ => return None,
    };
    digits.parse::<i64>().ok()?.checked_mul(scale)
}

/// `1M`, `1280K` or bytes: the form [`parse_size`] reads back.
fn format_size(bytes: i64) -> String {
    if bytes % MIB == 0 {
        format!("{}M", bytes / MIB)
    } else if bytes % KIB == 0 {
        format!("{}K", bytes / KIB)
    } else {
        bytes.to_string()
    }
}

/// Whether an LLVM feature string turns `feature` on.
fn llvm_has(llvm_features: &str, feature: &str) -> bool {
    llvm_features
        .split(',')
        .any(|f| f.strip_prefix('+') == Some(feature))
}

fn invalid(spec: &str, message: impl fmt::Display) -> Error {
    Error::Target(format!("invalid target `{spec}`: {message}"))
}

/// `features` with `feature` and everything it implies added (in [`FEATURES`] order).
fn enable(features: &mut Vec<&'static str>, feature: &'static str) {
    let mut pending = vec![feature];
    while let Some(f) = pending.pop() {
        if !features.contains(&f) {
            features.push(f);
            if let Some((_, implied)) = FEATURES.iter().find(|(name, _)| *name == f) {
                pending.extend(implied.iter().copied());
            }
        }
    }
    sort(features);
}

/// `features` without `feature` and everything that implies it.
fn disable(features: &mut Vec<&'static str>, feature: &'static str) {
    let mut pending = vec![feature];
    while let Some(f) = pending.pop() {
        features.retain(|x| *x != f);
        pending.extend(
            FEATURES
                .iter()
                .filter(|(_, implied)| implied.contains(&f))
                .map(|(name, _)| *name)
                .filter(|name| features.contains(name)),
        );
    }
}

fn sort(features: &mut [&'static str]) {
    features.sort_by_key(|f| FEATURES.iter().position(|(name, _)| name == f));
}

/// A spec that names a CPU with `features` on any machine: the table's name for `cpu` when
/// the table gives it exactly these features, else the widest generic level they cover, with
/// the rest added (`x86-64-v4,+avx512bf16`).
fn portable_spec(cpu: &str, features: &[&'static str]) -> String {
    if CPUS
        .iter()
        .any(|c| c.name == cpu && c.features() == features)
    {
        return cpu.to_string();
    }
    let level = CPUS
        .iter()
        .filter(|c| c.generic && c.level.iter().all(|f| features.contains(f)))
        .max_by_key(|c| c.level.len())
        .map_or(("x86-64", &[][..]), |c| (c.name, c.level));
    std::iter::once(level.0.to_string())
        .chain(
            features
                .iter()
                .filter(|f| !level.1.contains(f))
                .map(|f| format!("+{f}")),
        )
        .collect::<Vec<_>>()
        .join(",")
}

impl Target {
    /// The machine this process runs on, single-threaded: LLVM's host CPU and features, and
    /// the level-2 cache sysfs reports (2 MiB where it says nothing).
    pub fn host() -> Result<Target> {
        let host = host_facts()?;
        let features: Vec<&'static str> = FEATURES
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| llvm_has(&host.llvm_features, name))
            .collect();
        Ok(Target {
            triple: host.triple.clone(),
            cpu: host.cpu.clone(),
            llvm_features: host.llvm_features.clone(),
            spec: portable_spec(&host.cpu, &features),
            features,
            l2_bytes: host.l2_bytes.unwrap_or(DEFAULT_L2),
            threads: 1,
            threads_fixed: false,
            exact: true,
        })
    }

    /// `FXMLIR_TARGET` if it is set and not empty, else the host.
    pub fn from_env() -> Result<Target> {
        match std::env::var("FXMLIR_TARGET") {
            Ok(spec) if !spec.trim().is_empty() => Target::parse(&spec),
            _ => Target::host(),
        }
    }

    /// The target a spec names (see the module documentation): a base, then changes.
    pub fn parse(spec: &str) -> Result<Target> {
        let mut items = spec.split(',').map(str::trim);
        let base = items.next().unwrap_or_default();
        let mut target = match base {
            "host" | "native" => Target::host()?,
            name => {
                let cpu = CPUS.iter().find(|c| c.name == name).ok_or_else(|| {
                    invalid(
                        spec,
                        format!(
                            "unknown CPU `{name}`; known: host, {}",
                            CPUS.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
                        ),
                    )
                })?;
                Target {
                    triple: NAMED_TRIPLE.to_string(),
                    cpu: cpu.name.to_string(),
                    llvm_features: String::new(),
                    features: cpu.features(),
                    l2_bytes: cpu.l2_bytes,
                    threads: 1,
                    threads_fixed: false,
                    exact: cpu.generic,
                    spec: String::new(),
                }
            }
        };
        let mut changes = Vec::new();
        for item in items {
            if let Some(name) = item.strip_prefix('+').or_else(|| item.strip_prefix('-')) {
                let feature = FEATURES
                    .iter()
                    .map(|(f, _)| *f)
                    .find(|f| *f == name)
                    .ok_or_else(|| {
                        invalid(
                            spec,
                            format!(
                                "unknown feature `{name}`; known: {}",
                                FEATURES
                                    .iter()
                                    .map(|(f, _)| *f)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                    })?;
                if item.starts_with('+') {
                    enable(&mut target.features, feature);
                } else {
                    disable(&mut target.features, feature);
                }
                changes.push(item.to_string());
            } else if let Some(size) = item.strip_prefix("l2=") {
                target.l2_bytes = parse_size(size).filter(|b| *b > 0).ok_or_else(|| {
                    invalid(spec, format!("`{item}`: expected a size like 512K or 2M"))
                })?;
            } else if let Some(n) = item.strip_prefix("threads=") {
                target.threads = n.parse().ok().filter(|t| *t > 0).ok_or_else(|| {
                    invalid(spec, format!("`{item}`: expected a positive integer"))
                })?;
                target.threads_fixed = true;
            } else {
                return Err(invalid(
                    spec,
                    format!(
                        "cannot read `{item}`: expected +feature, -feature, l2=<size> or threads=<n>"
                    ),
                ));
            }
        }
        if !changes.is_empty() {
            // LLVM applies the changes after the CPU's (or the host's) own features, with
            // their implications.
            target.llvm_features = std::iter::once(target.llvm_features.as_str())
                .filter(|f| !f.is_empty())
                .chain(changes.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(",");
        }
        // `host` keeps the portable name `Target::host` gave it, so that the spec means this
        // CPU on any machine.
        if target.spec.is_empty() {
            target.spec = base.to_string();
        }
        target.spec = std::iter::once(target.spec.clone())
            .chain(changes)
            .collect::<Vec<_>>()
            .join(",");
        Ok(target)
    }

    /// This target with kernels split across `threads` threads.
    pub fn with_threads(self, threads: usize) -> Target {
        Target {
            threads: threads.max(1),
            threads_fixed: true,
            ..self
        }
    }

    /// This target with `threads` threads unless its spec said `threads=` (the backend passes
    /// torch's intra-op thread count here).
    pub fn with_default_threads(self, threads: usize) -> Target {
        if self.threads_fixed {
            self
        } else {
            self.with_threads(threads)
        }
    }

    /// The instruction-set features fxmlir decides by that the target has (LLVM's names).
    pub fn features(&self) -> &[&'static str] {
        &self.features
    }

    /// Whether the target has `feature` (an LLVM feature name from `FEATURES`).
    pub fn has(&self, feature: &str) -> bool {
        self.features.contains(&feature)
    }

    /// Bytes per vector register: 64 with AVX-512, 32 with AVX, else 16.
    pub fn vector_bytes(&self) -> i64 {
        if self.has("avx512f") {
            64
        } else if self.has("avx") {
            32
        } else {
            16
        }
    }

    /// Architectural vector registers: 32 with AVX-512, else 16.
    pub fn registers(&self) -> i64 {
        if self.has("avx512f") { 32 } else { 16 }
    }

    /// AVX512-BF16's dot product of bf16 pairs (`vdpbf16ps` on 512-bit registers), which the
    /// lowering and the schedule use for bf16 products.
    pub fn bf16_dot(&self) -> bool {
        self.has("avx512bf16")
    }

    /// The spec this target was made from, normalised (`host,-avx512bf16`, `znver4`); with
    /// [`Target::describe`]'s cache size and threads it reads back as the same target.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// A complete spec: the base and changes, then the cache size and threads
    /// (`znver4,l2=1M,threads=2`). Parsing it gives the same target on the same host (and the
    /// same target on any host for named CPUs).
    pub fn describe(&self) -> String {
        format!(
            "{},l2={},threads={}",
            self.spec,
            format_size(self.l2_bytes),
            self.threads
        )
    }

    /// Everything that changes the code generated for this target, for the compile-cache key:
    /// LLVM's triple, CPU and features, and the decisions' inputs.
    pub fn fingerprint(&self) -> String {
        format!(
            "{} {} {} features={} l2={} threads={}",
            self.triple,
            self.cpu,
            self.llvm_features,
            self.features.join("+"),
            self.l2_bytes,
            self.threads
        )
    }

    /// A readable summary: `znver4: avx512f, avx512bf16, ...; 64-byte vectors; L2 1M;
    /// 2 threads`.
    pub fn summary(&self) -> String {
        format!(
            "{} ({}): {}; {}-byte vectors, {} registers; L2 {}; {} thread{}",
            self.spec,
            self.cpu,
            if self.features.is_empty() {
                "no vector extensions beyond SSE2".to_string()
            } else {
                self.features.join(", ")
            },
            self.vector_bytes(),
            self.registers(),
            format_size(self.l2_bytes),
            self.threads,
            if self.threads == 1 { "" } else { "s" }
        )
    }

    /// Ok when code for this target runs on this machine: the host has every feature the
    /// target has, and the target names every instruction its code may use (targets based on
    /// `host` or on a generic level). Named CPUs compile anywhere but
    /// run only where they are the host's own CPU name and features.
    pub fn check_runs_here(&self) -> Result<()> {
        let host = Target::host()?;
        let missing: Vec<&str> = self
            .features
            .iter()
            .copied()
            .filter(|f| !host.has(f))
            .collect();
        if !missing.is_empty() {
            return Err(Error::Target(format!(
                "code for target `{}` cannot run on this host ({}): it lacks {}",
                self.spec,
                host.cpu,
                missing.join(", ")
            )));
        }
        let same_cpu = self.cpu == host.cpu && self.features == host.features;
        if self.exact || same_cpu {
            Ok(())
        } else {
            Err(Error::Target(format!(
                "code for target `{}` may use instructions of {} that this host ({}) lacks; \
                 to run here, compile for `host` with features removed or for a generic \
                 level (x86-64-v3, x86-64-v4 with +features)",
                self.spec, self.cpu, host.cpu
            )))
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_cpus_have_their_features_and_caches() {
        let zen4 = Target::parse("znver4").unwrap();
        assert!(zen4.bf16_dot() && zen4.has("avx512vnni"));
        assert_eq!(
            (zen4.vector_bytes(), zen4.registers(), zen4.l2_bytes),
            (64, 32, MIB)
        );
        let skx = Target::parse("skylake-avx512").unwrap();
        assert!(!skx.bf16_dot() && skx.has("avx512f"));
        let v3 = Target::parse("x86-64-v3").unwrap();
        assert_eq!((v3.vector_bytes(), v3.registers()), (32, 16));
        assert_eq!(v3.l2_bytes, DEFAULT_L2);
        assert!(v3.exact && !skx.exact);
    }

    #[test]
    fn changes_follow_implications() {
        let t = Target::parse("x86-64-v3,+avx512bf16,l2=1280K,threads=2").unwrap();
        assert!(t.bf16_dot() && t.has("avx512f") && t.has("avx512bw"));
        assert_eq!((t.l2_bytes, t.threads), (1280 * KIB, 2));
        assert_eq!(t.llvm_features, "+avx512bf16");
        assert!(
            t.exact,
            "a generic level with features added is still exact"
        );
        let t = Target::parse("znver4,-avx512f").unwrap();
        assert!(!t.has("avx512bf16") && !t.has("avx512vnni") && t.has("avx2"));
        assert_eq!(t.vector_bytes(), 32);
        assert_eq!(t.spec(), "znver4,-avx512f");
    }

    #[test]
    fn a_spec_s_threads_win_over_the_default() {
        assert_eq!(
            Target::parse("znver4")
                .unwrap()
                .with_default_threads(4)
                .threads,
            4
        );
        let fixed = Target::parse("znver4,threads=2").unwrap();
        assert_eq!(fixed.clone().with_default_threads(4).threads, 2);
        assert_eq!(fixed.with_threads(3).threads, 3);
    }

    #[test]
    fn described_targets_read_back() {
        for spec in ["znver3", "cooperlake,-avx512bf16,l2=3M,threads=4", "x86-64"] {
            let t = Target::parse(spec).unwrap();
            let again = Target::parse(&t.describe()).unwrap();
            assert_eq!(again.describe(), t.describe(), "{spec}");
            assert_eq!(again.fingerprint(), t.fingerprint(), "{spec}");
        }
    }

    #[test]
    fn bad_specs_are_errors_naming_the_item() {
        for (spec, expected) in [
            ("pentium9", "unknown CPU `pentium9`"),
            ("znver4,+sse9", "unknown feature `sse9`"),
            ("znver4,l2=lots", "`l2=lots`: expected a size"),
            (
                "znver4,threads=0",
                "`threads=0`: expected a positive integer",
            ),
            ("znver4,fast", "cannot read `fast`"),
            ("", "unknown CPU ``"),
        ] {
            let message = Target::parse(spec).unwrap_err().to_string();
            assert!(message.contains(expected), "{spec}: {message}");
        }
    }

    #[test]
    fn hosts_are_named_portably() {
        let with = |extra: &[&'static str]| -> Vec<&'static str> {
            let mut features = V4.to_vec();
            features.extend(extra);
            features
        };
        assert_eq!(portable_spec("znver4", &with(VNNI_BF16)), "znver4");
        // A Zen 4 whose hypervisor hides AVX-512.
        assert_eq!(portable_spec("znver4", V3), "x86-64-v3");
        assert_eq!(
            portable_spec("tigerlake", &with(VNNI)),
            "x86-64-v4,+avx512vnni"
        );
        assert_eq!(portable_spec("pentium4", &[]), "x86-64");
        let host = Target::host().unwrap();
        let again = Target::parse(host.spec()).unwrap();
        assert_eq!(again.features(), host.features());
        let without = Target::parse("host,-avx512f").unwrap();
        assert!(without.spec().ends_with(",-avx512f"), "{}", without.spec());
    }

    #[test]
    fn host_derived_targets_run_here() {
        let host = Target::host().unwrap();
        host.check_runs_here().unwrap();
        Target::parse("host,-avx512f,-avx2")
            .unwrap()
            .check_runs_here()
            .unwrap();
        Target::parse("x86-64").unwrap().check_runs_here().unwrap();
        let bf16 = Target::parse("x86-64-v4,+avx512bf16").unwrap();
        if host.has("avx512bf16") {
            bf16.check_runs_here().unwrap();
        } else {
            let message = bf16.check_runs_here().unwrap_err().to_string();
            assert!(message.contains("lacks"), "{message}");
        }
    }
}
