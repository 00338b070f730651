//! The workspace's layering, checked: in every crate, the modules' imports form no loop, file by
//! file and folder by folder (a folder and its same-named file, `x.rs` beside `x/`, count as
//! one folder; the crate's root file as a folder of its own). Without a loop the modules stand
//! in floors, each importing only the floors below it, so that each crate reads top-down.
//!
//! Imports are the paths code names through `crate::` and `super::` (in `use` lines and in
//! code), resolved to the deepest module that has a file; comments and doc links do not count,
//! nor do test modules (`#[cfg(test)] mod ...` blocks, `tests.rs` and `*_tests.rs` files,
//! `tests/` folders).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's source files, by module path (`[]` for the root, `["a", "b"]` for `a/b.rs`).
struct Crate {
    name: String,
    modules: BTreeMap<Vec<String>, PathBuf>,
    /// What each module's `use` lines bring into it, by the name they bring.
    uses: BTreeMap<Vec<String>, Uses>,
}

/// The names one module's `use` lines bring in, and the modules it takes everything from.
#[derive(Default)]
struct Uses {
    names: BTreeMap<String, Option<Vec<String>>>,
    globs: Vec<Vec<String>>,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A file's path from the workspace's root, as a report names it.
fn shown(file: &Path) -> String {
    let root = workspace();
    file.strip_prefix(&root)
        .unwrap_or(file)
        .display()
        .to_string()
}

fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !is_test_file(&path) {
            out.push(path);
        }
    }
}

fn crates() -> Vec<Crate> {
    let mut out = Vec::new();
    let dir = workspace().join("crates");
    for entry in std::fs::read_dir(&dir).expect("crates/").flatten() {
        let src = entry.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let mut modules = BTreeMap::new();
        for file in files {
            let relative = file.strip_prefix(&src).unwrap();
            let mut path: Vec<String> = relative
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            let last = path.pop().unwrap();
            match last.as_str() {
                "lib.rs" | "main.rs" if path.is_empty() => {}
                "mod.rs" => {}
                other => path.push(other.trim_end_matches(".rs").to_string()),
            }
            modules.insert(path, file);
        }
        let uses = modules
            .iter()
            .map(|(me, file)| {
                let code = code_of(&std::fs::read_to_string(file).unwrap());
                (me.clone(), uses_of(&code, me, |m| modules.contains_key(m)))
            })
            .collect();
        out.push(Crate {
            name: entry.file_name().to_string_lossy().into_owned(),
            modules,
            uses,
        });
    }
    out
}

/// The code of a file without its comments and its test modules.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut at = 0;
    while at < lines.len() {
        let line = lines[at];
        at += 1;
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            // Attributes between the `cfg` and the item (`#[path = "..."]`) belong to it.
            let mut item = at;
            while item < lines.len() && lines[item].trim_start().starts_with("#[") {
                item += 1;
            }
            if item < lines.len() && declares_module(lines[item]) {
                // Skip the test module: one line (`mod tests;`) or a braced block.
                let head = lines[item];
                at = item + 1;
                if head.contains('{') {
                    let mut depth = brace_balance(head);
                    while depth > 0 && at < lines.len() {
                        depth += brace_balance(lines[at]);
                        at += 1;
                    }
                }
                continue;
            }
        }
        let line = match line.find("// ") {
            Some(cut) if !line[..cut].contains('"') => &line[..cut],
            _ => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Whether `line` declares a module, at any visibility (`mod x`, `pub(crate) mod x`).
fn declares_module(line: &str) -> bool {
    let mut rest = line.trim_start();
    if let Some(after) = rest.strip_prefix("pub") {
        rest = after.trim_start();
        if rest.starts_with('(') {
            let Some(close) = rest.find(')') else {
                return false;
            };
            rest = rest[close + 1..].trim_start();
        }
    }
    rest.starts_with("mod ")
}

fn brace_balance(line: &str) -> i32 {
    line.chars()
        .map(|c| match c {
            '{' => 1,
            '}' => -1,
            _ => 0,
        })
        .sum()
}

/// Reads a path after its first `::` (`ident(::ident)*`, or a `{group}` of such paths at any
/// step) at `at`, adding each full path (with `base` in front) to `out`. Returns where the
/// path ends.
fn read_path(code: &[u8], mut at: usize, base: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = base.to_vec();
    loop {
        if code.get(at) == Some(&b'{') {
            at += 1;
            loop {
                while at < code.len() && (code[at].is_ascii_whitespace() || code[at] == b',') {
                    at += 1;
                }
                if at >= code.len() || code[at] == b'}' {
                    return at + 1;
                }
                let before = at;
                at = read_path(code, at, &path, out);
                // Skip what follows an entry (`as x`) up to the next entry.
                while at < code.len() && code[at] != b',' && code[at] != b'}' {
                    at += 1;
                }
                if at == before {
                    at += 1;
                }
            }
        }
        let start = at;
        while at < code.len() && (code[at].is_ascii_alphanumeric() || code[at] == b'_') {
            at += 1;
        }
        if at > start {
            path.push(String::from_utf8_lossy(&code[start..at]).into_owned());
        }
        if code[at..].starts_with(b"::")
            && code
                .get(at + 2)
                .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_' || *c == b'{')
        {
            at += 2;
            continue;
        }
        out.push(path);
        return at;
    }
}

/// The module paths a file's code names: through `crate::`, `super::` and `self::`, and
/// through the names of its own child modules (`api::Entity` in `sharding/mod.rs`).
fn named_paths(
    code: &str,
    me: &[String],
    is_module: impl Fn(&[String]) -> bool,
) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let starts_word = (at == 0 || !is_ident(bytes[at - 1]) && bytes[at - 1] != b':')
            && (bytes[at].is_ascii_alphabetic() || bytes[at] == b'_');
        if !starts_word {
            at += 1;
            continue;
        }
        let end = (at..bytes.len())
            .find(|&i| !is_ident(bytes[i]))
            .unwrap_or(bytes.len());
        if !bytes[end..].starts_with(b"::") {
            at = end;
            continue;
        }
        let word = &code[at..end];
        let mut base = me.to_vec();
        let mut next = end + 2;
        match word {
            "crate" => base.clear(),
            // `super` of `a/b.rs` (module `a::b`) is `a`; of `a.rs` or `a/mod.rs` (module
            // `a`) it is the root.
            "super" => {
                base.pop();
                while bytes[next..].starts_with(b"super::") {
                    base.pop();
                    next += 7;
                }
            }
            "self" => {}
            child if is_module(&[me, &[child.to_string()]].concat()) => next = at,
            _ => {
                at = end;
                continue;
            }
        }
        at = read_path(bytes, next, &base, &mut out);
    }
    out
}

/// Each file's imports, resolved to files of the same crate (itself left out).
fn file_graph(krate: &Crate) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut graph = BTreeMap::new();
    for (me, file) in &krate.modules {
        let text = std::fs::read_to_string(file).unwrap();
        let mut targets = BTreeSet::new();
        for path in named_paths(&code_of(&text), me, |m| krate.modules.contains_key(m)) {
            if let Some(target) = krate.resolve(&path, 0)
                && target != *file
            {
                targets.insert(target);
            }
        }
        graph.insert(file.clone(), targets);
    }
    graph
}

impl Crate {
    /// The file that defines what `path` names: the deepest module on the path that has a
    /// file, or, when the name after it is one that module only brings in with `use`, where
    /// that `use` leads (a re-export is not where a thing stands). `None` for another crate's.
    fn resolve(&self, path: &[String], depth: usize) -> Option<PathBuf> {
        let k = (0..=path.len())
            .rev()
            .find(|&k| self.modules.contains_key(&path[..k]))
            .expect("the root always resolves");
        let module = &path[..k];
        let here = Some(self.modules[module].clone());
        let (Some(name), true) = (path.get(k), depth < 16) else {
            return here;
        };
        let uses = &self.uses[module];
        match uses.names.get(name) {
            Some(None) => None,
            Some(Some(target)) => {
                let mut next = target.clone();
                next.extend_from_slice(&path[k + 1..]);
                self.resolve(&next, depth + 1)
            }
            None => {
                // A name a glob brings in: the glob's module, if it defines the name.
                for glob in &uses.globs {
                    if let Some(file) = self.modules.get(glob)
                        && defines(&std::fs::read_to_string(file).unwrap(), name)
                    {
                        let mut next = glob.clone();
                        next.extend_from_slice(&path[k..]);
                        return self.resolve(&next, depth + 1);
                    }
                }
                here
            }
        }
    }
}

/// Whether `code` defines an item called `name` at any visibility.
fn defines(code: &str, name: &str) -> bool {
    [
        "struct", "enum", "fn", "const", "static", "type", "trait", "mod",
    ]
    .iter()
    .any(|kind| {
        code.match_indices(&format!("{kind} {name}"))
            .any(|(at, m)| {
                !code[at + m.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
            })
    })
}

/// What the `use` lines of a module's code bring in (their names, and glob sources), the
/// paths made absolute; `None` for another crate's names.
fn uses_of(code: &str, me: &[String], is_module: impl Fn(&[String]) -> bool) -> Uses {
    let mut uses = Uses::default();
    for statement in code.split(';') {
        let statement = statement.trim();
        let Some(at) = statement.find("use ") else {
            continue;
        };
        let head = statement[..at].trim();
        if !(head.is_empty() || head.starts_with("pub")) || head.contains('{') {
            continue;
        }
        let tokens = use_tokens(&statement[at + 4..]);
        let mut entries = Vec::new();
        use_tree(&tokens, &mut 0, Vec::new(), &mut entries);
        for (alias, path) in entries {
            let absolute = absolute(&path, me, &is_module);
            match alias {
                Some(alias) => {
                    uses.names.insert(alias, absolute);
                }
                None => uses.globs.extend(absolute),
            }
        }
    }
    uses
}

/// `path` from a `use` line made absolute: `crate::`, `super::`, `self::` and child modules
/// are this crate's; anything else is another crate's (`None`).
fn absolute(
    path: &[String],
    me: &[String],
    is_module: impl Fn(&[String]) -> bool,
) -> Option<Vec<String>> {
    let (first, rest) = path.split_first()?;
    let mut base = me.to_vec();
    let mut rest = rest;
    match first.as_str() {
        "crate" => base.clear(),
        "self" => {}
        "super" => {
            base.pop();
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        child if is_module(&[me, &[child.to_string()]].concat()) => rest = path,
        _ => return None,
    }
    Some([base.as_slice(), rest].concat())
}

fn use_tokens(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            tokens.push(std::mem::take(&mut word));
        }
        if matches!(c, '{' | '}' | ',' | '*') {
            tokens.push(c.to_string());
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

/// Reads one use tree from `tokens` (`::` already dropped): each entry as (the name it brings,
/// or `None` for a glob; its path with `prefix` in front).
fn use_tree(
    tokens: &[String],
    at: &mut usize,
    prefix: Vec<String>,
    out: &mut Vec<(Option<String>, Vec<String>)>,
) {
    let mut path = prefix;
    while let Some(token) = tokens.get(*at) {
        match token.as_str() {
            "{" => {
                *at += 1;
                while tokens.get(*at).is_some_and(|t| t != "}") {
                    if tokens[*at] == "," {
                        *at += 1;
                        continue;
                    }
                    use_tree(tokens, at, path.clone(), out);
                }
                *at += 1;
                return;
            }
            "*" => {
                *at += 1;
                out.push((None, path));
                return;
            }
            "," | "}" => break,
            "as" => {
                *at += 1;
                let alias = tokens.get(*at).cloned().unwrap_or_default();
                *at += 1;
                if path.last().is_some_and(|s| s == "self") {
                    path.pop();
                }
                out.push((Some(alias), path));
                return;
            }
            word => {
                path.push(word.to_string());
                *at += 1;
            }
        }
    }
    if path.last().is_some_and(|s| s == "self") {
        path.pop();
    }
    if let Some(name) = path.last().cloned() {
        out.push((Some(name), path));
    }
}

/// The folder a file stands in: the first component under `src` (`x.rs` and `x/` as one),
/// or the root file itself.
fn folder_of(file: &Path) -> String {
    let mut after_src = file
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .skip_while(|c| c != "src");
    after_src.next();
    let first = after_src.next().unwrap_or_default();
    first.trim_end_matches(".rs").to_string()
}

/// The loops of `graph` (strongly connected parts of more than one node), each sorted.
fn loops<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    // Kosaraju: finish order on the graph, then components on its reverse.
    fn visit<N: Ord + Clone>(
        n: &N,
        graph: &BTreeMap<N, BTreeSet<N>>,
        seen: &mut BTreeSet<N>,
        order: &mut Vec<N>,
    ) {
        if !seen.insert(n.clone()) {
            return;
        }
        for m in graph.get(n).into_iter().flatten() {
            visit(m, graph, seen, order);
        }
        order.push(n.clone());
    }
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    for n in graph.keys() {
        visit(n, graph, &mut seen, &mut order);
    }
    let mut reverse: BTreeMap<N, BTreeSet<N>> = BTreeMap::new();
    for (n, ms) in graph {
        for m in ms {
            reverse.entry(m.clone()).or_default().insert(n.clone());
        }
    }
    let mut assigned = BTreeSet::new();
    let mut out = Vec::new();
    for n in order.iter().rev() {
        let mut part = Vec::new();
        visit(n, &reverse, &mut assigned, &mut part);
        if part.len() > 1 {
            part.sort();
            out.push(part);
        }
    }
    out
}

#[test]
fn no_crate_has_an_import_loop_between_files_or_folders() {
    let mut found = Vec::new();
    let crates = crates();
    assert!(crates.len() >= 10, "the crates are found");
    for krate in &crates {
        let files = file_graph(krate);
        for part in loops(&files) {
            let lines: Vec<String> = part
                .iter()
                .flat_map(|f| {
                    files[f]
                        .iter()
                        .filter(|t| part.contains(t))
                        .map(move |t| format!("  {} -> {}", shown(f), shown(t)))
                })
                .collect();
            found.push(format!(
                "{}: files import each other:\n{}",
                krate.name,
                lines.join("\n")
            ));
        }
        let mut folders: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut why: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for (file, targets) in &files {
            let from = folder_of(file);
            folders.entry(from.clone()).or_default();
            for target in targets {
                let to = folder_of(target);
                if to != from {
                    folders.get_mut(&from).unwrap().insert(to.clone());
                    why.entry((from.clone(), to)).or_default().push(format!(
                        "{} -> {}",
                        shown(file),
                        shown(target)
                    ));
                }
            }
        }
        for part in loops(&folders) {
            let mut lines = Vec::new();
            for ((from, to), ties) in &why {
                if part.contains(from) && part.contains(to) {
                    lines.push(format!("  {from} -> {to}: {}", ties.join("; ")));
                }
            }
            found.push(format!(
                "{}: folders import each other:\n{}",
                krate.name,
                lines.join("\n")
            ));
        }
    }
    assert!(found.is_empty(), "import loops:\n{}", found.join("\n"));
}

#[test]
fn the_check_sees_a_loop_and_what_ties_it() {
    let graph: BTreeMap<&str, BTreeSet<&str>> = [
        ("a", BTreeSet::from(["b"])),
        ("b", BTreeSet::from(["c"])),
        ("c", BTreeSet::from(["a", "d"])),
        ("d", BTreeSet::new()),
    ]
    .into_iter()
    .collect();
    assert_eq!(loops(&graph), vec![vec!["a", "b", "c"]]);
    let me = vec!["sharding".to_string(), "region".to_string()];
    let code = code_of(
        "use crate::config::{self, Settings};\n// use crate::commented::Out;\nuse super::{view::View, kind::{a, b}};\nlet x = super::super::top::f();\ntimers::next(tokio::time::now());\n#[cfg(test)]\nmod tests {\n    use crate::hidden::X;\n}\n#[cfg(test)]\npub(crate) mod fixtures {\n    use super::*;\n}\n#[cfg(test)]\n#[path = \"x_tests.rs\"]\nmod more_tests;\n",
    );
    let modules = [vec![
        "sharding".to_string(),
        "region".to_string(),
        "timers".to_string(),
    ]];
    let paths = named_paths(&code, &me, |m| modules.iter().any(|x| x == m));
    let shown: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        shown,
        [
            "config::self",
            "config::Settings",
            "sharding::view::View",
            "sharding::kind::a",
            "sharding::kind::b",
            "top::f",
            "sharding::region::timers::next"
        ]
    );
}
