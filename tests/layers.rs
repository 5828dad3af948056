//! The architecture, checked: layers only point down (`graph → lower → pipeline → jit →
//! runtime`, with the leaves beneath them), and no import circle joins the files of `lower/` or
//! of `pipeline/`. It reads the paths each source file names in code (`use` lines and inline
//! `crate::…`/`super::…` paths, comments and `#[cfg(test)]` modules left out: tests may drive the
//! whole compiler).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers from the bottom; a module may name modules of its own layer or below. The longest
/// matching prefix decides (`crate::pipeline::ir` is a leaf, the rest of `pipeline` is not).
const LAYERS: &[(&str, u32)] = &[
    ("crate::error", 0),
    ("crate::target", 0),
    ("crate::tuning", 0),
    ("crate::dumps", 0),
    ("crate::libmvec", 0),
    ("crate::logging", 0),
    ("crate::context", 0),
    ("crate::native", 0),
    ("crate::pipeline::ir", 0),
    ("crate::graph", 1),
    ("crate::lower", 2),
    ("crate::pipeline", 3),
    ("crate::jit", 4),
    ("crate::runtime", 5),
    ("crate::python", 6),
    ("crate", 6),
];

fn layer(module: &str) -> u32 {
    LAYERS
        .iter()
        .filter(|(prefix, _)| module == *prefix || module.starts_with(&format!("{prefix}::")))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, rank)| *rank)
        .unwrap_or_else(|| panic!("{module} is in no layer: add it to LAYERS"))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().unwrap() != "bin" {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/a/b.rs` → `crate::a::b`, `src/a/mod.rs` → `crate::a`, `src/lib.rs` → `crate`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    std::iter::once("crate".to_string())
        .chain(parts)
        .collect::<Vec<_>>()
        .join("::")
}

/// The code of a file without comments and without its `#[cfg(test)]` module.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Expands `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e`.
fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else {
        return vec![path.trim().trim_end_matches("::").to_string()];
    };
    let prefix = &path[..open];
    let Some(close) = path.rfind('}') else {
        return Vec::new();
    };
    let inner = &path[open + 1..close];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .map(str::trim)
        .filter(|item| !item.is_empty() && *item != "self")
        .flat_map(|item| {
            // `name as alias` names `name`; a nested group keeps its own aliases.
            let item = match item.contains('{') {
                true => item,
                false => item.split(" as ").next().unwrap_or(item),
            };
            expand(&format!("{prefix}{item}"))
        })
        .collect()
}

/// Every path the code names that starts with `crate`, `super` or `self`, made absolute.
fn named_paths(module: &str, code: &str) -> BTreeSet<String> {
    let mut paths = Vec::new();
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        let line = line.trim_start();
        let Some(rest) = ["pub use ", "pub(crate) use ", "pub(super) use ", "use "]
            .iter()
            .find_map(|prefix| line.strip_prefix(prefix))
        else {
            continue;
        };
        let mut statement = rest.to_string();
        while !statement.contains(';') {
            let Some(next) = lines.next() else { break };
            statement.push_str(next);
        }
        paths.extend(expand(statement.split(';').next().unwrap_or_default()));
    }
    let bytes = code.as_bytes();
    for start in ["crate::", "super::"] {
        for (at, _) in code.match_indices(start) {
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            let end = code[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| at + e);
            paths.push(code[at..end].trim_end_matches(':').to_string());
        }
    }
    // `super` is the module's parent (a `mod.rs` is its directory's module).
    let own: Vec<&str> = module.split("::").collect();
    paths
        .into_iter()
        .filter(|p| p.starts_with("crate") || p.starts_with("super") || p.starts_with("self"))
        .map(|p| {
            let mut resolved: Vec<&str> = own.clone();
            let mut segments = p.split("::").peekable();
            match segments.peek() {
                Some(&"crate") => {
                    resolved = vec!["crate"];
                    segments.next();
                }
                Some(&"self") => {
                    segments.next();
                }
                _ => {}
            }
            for segment in segments {
                if segment == "super" {
                    resolved.pop();
                } else {
                    resolved.push(segment);
                }
            }
            resolved.join("::")
        })
        .collect()
}

/// The module a path names: its longest prefix that is a module of the crate.
fn owner(modules: &BTreeSet<String>, path: &str) -> Option<String> {
    let mut candidate = path.to_string();
    loop {
        if modules.contains(&candidate) {
            return Some(candidate);
        }
        candidate = candidate.rsplit_once("::")?.0.to_string();
    }
}

struct Crate {
    /// module → the modules it names.
    imports: BTreeMap<String, BTreeSet<String>>,
}

fn read_crate() -> Crate {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut imports = BTreeMap::new();
    for file in &files {
        let module = module_of(&src, file);
        let text = std::fs::read_to_string(file).unwrap();
        let named = named_paths(&module, &code(&text))
            .into_iter()
            .filter_map(|p| owner(&modules, &p))
            .filter(|m| *m != module)
            .collect();
        imports.insert(module, named);
    }
    Crate { imports }
}

#[test]
fn layers_only_point_down() {
    let krate = read_crate();
    let mut upward = Vec::new();
    for (module, named) in &krate.imports {
        for target in named {
            // A module may name its own submodules (`pipeline` runs its stages).
            if target.starts_with(&format!("{module}::")) {
                continue;
            }
            if layer(target) > layer(module) {
                upward.push(format!(
                    "{module} (layer {}) names {target} (layer {})",
                    layer(module),
                    layer(target)
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports from a layer above:\n{}",
        upward.join("\n")
    );
}

/// The files directly under `dir` (`crate::lower`'s families and helpers) and the edges
/// between them, a submodule counting as its parent file.
fn circles_under(krate: &Crate, dir: &str) -> Vec<String> {
    let child = |m: &str| -> Option<String> {
        let rest = m.strip_prefix(&format!("{dir}::"))?;
        Some(format!("{dir}::{}", rest.split("::").next().unwrap()))
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, named) in &krate.imports {
        let Some(from) = child(module) else { continue };
        for target in named {
            if let Some(to) = child(target)
                && to != from
            {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    // A node on a circle reaches itself.
    let reaches = |start: &String| {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&String> = edges.get(start).into_iter().flatten().collect();
        while let Some(node) = stack.pop() {
            if seen.insert(node.clone()) {
                stack.extend(edges.get(node).into_iter().flatten());
            }
        }
        seen.contains(start)
    };
    edges.keys().filter(|m| reaches(m)).cloned().collect()
}

#[test]
fn no_import_circle_in_lower_or_pipeline() {
    let krate = read_crate();
    for dir in ["crate::lower", "crate::pipeline"] {
        let circle = circles_under(&krate, dir);
        assert!(
            circle.is_empty(),
            "modules on an import circle in {dir}: {circle:?}"
        );
    }
}

#[test]
fn the_checker_sees_imports() {
    let krate = read_crate();
    let schedule = &krate.imports["crate::pipeline::schedule::plan"];
    assert!(
        schedule.contains("crate::pipeline::ir::maps"),
        "{schedule:?}"
    );
    assert!(
        schedule.contains("crate::pipeline::schedule::model"),
        "{schedule:?}"
    );
    assert!(krate.imports["crate::runtime"].contains("crate::lower"));
    assert_eq!(
        expand("super::{a, b::{c, d as e}}"),
        ["super::a", "super::b::c", "super::b::d"]
    );
}
