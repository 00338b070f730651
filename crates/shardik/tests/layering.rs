//! The workspace's layering, checked: inside every crate, at every folder, the files and
//! sub-folders import each other without a loop, so each crate reads top-down.
//!
//! A loop is what makes a codebase hard to carry on: a parent module that defines what its
//! children import while it also imports them, or two folders that each reach into the other.
//! This test reads the sources (no compiler needed), builds the graph of which file uses which,
//! and fails with the loops it finds, naming the files and the names that tie them.
//!
//! What counts as a use: a `use` declaration (private or `pub`), and a path in code that starts
//! at `crate::`, `super::`, `self::` or a child module. A name is followed through the
//! re-exports of the module it is taken from to the file that defines it, so a module that only
//! hands names on (a face) is not taken for their home. Comments, doc links, string literals,
//! `#[cfg(test)]` items and test files do not count: tests may reach anywhere.
//!
//! Loops are looked for at every level: inside a folder, each file and each sub-folder is one
//! unit (a module's own file, `foo.rs` beside `foo/` or `foo/mod.rs`, belongs to its folder),
//! and the units of one folder must not import each other in a circle.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[test]
fn no_crate_has_a_loop_between_its_files_or_folders() {
    let mut report = String::new();
    for house in workspace_crates() {
        for circle in house.circles() {
            writeln!(report, "{}", circle.describe(&house)).unwrap();
        }
    }
    assert!(
        report.is_empty(),
        "modules that import each other in a loop:\n{report}"
    );
}

/// A file past a thousand lines is where concepts start to share a room: split it along
/// what its parts serve before it grows further. Test files are not module files and do not
/// count; a module's own inline tests do.
#[test]
fn no_source_file_is_longer_than_a_thousand_lines() {
    const MOST_LINES: usize = 1_000;
    let mut long = Vec::new();
    for house in workspace_crates() {
        for file in &house.files {
            let text = std::fs::read_to_string(&file.path).unwrap();
            let lines = text.lines().count();
            if lines > MOST_LINES {
                long.push(format!("{} ({lines} lines)", file.path.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "module files longer than {MOST_LINES} lines: {long:?}"
    );
}

/// Every crate of the workspace, read.
fn workspace_crates() -> Vec<House> {
    let crates_dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap();
    let mut houses = Vec::new();
    for entry in std::fs::read_dir(&crates_dir).expect("the crates folder") {
        let src = entry.expect("a crate folder").path().join("src");
        let Some(root) = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|p| p.exists())
        else {
            continue;
        };
        houses.push(House::read(&root));
    }
    assert!(
        houses.len() >= 11,
        "read {} crates; expected every crate of the workspace",
        houses.len()
    );
    houses
}

/// The check must be able to fail: a synthetic crate whose parent module defines what a child
/// imports while it re-exports that child has a loop; the same crate with the shared item moved
/// to a child below has none. Doc links and `#[cfg(test)]` code never count.
#[test]
fn the_check_finds_a_parent_child_loop_and_ignores_docs_and_tests() {
    let dir = scratch_dir("loop");
    write(
        &dir,
        "lib.rs",
        "pub mod kinds;\n/// See [`crate::kinds::Least`].\npub fn f() {}\n",
    );
    write(
        &dir,
        "kinds.rs",
        "mod least;\npub use least::Least;\npub trait Strategy {}\n#[cfg(test)]\nmod tests { use crate::f; }\n",
    );
    write(
        &dir,
        "kinds/least.rs",
        "use super::Strategy;\npub struct Least;\nimpl Strategy for Least {}\n",
    );
    let circles = House::read(&dir.join("lib.rs")).circles();
    assert_eq!(circles.len(), 1, "one loop, inside kinds/");
    let described = circles[0].describe(&House::read(&dir.join("lib.rs")));
    assert!(
        described.contains("kinds.rs") && described.contains("least.rs"),
        "{described}"
    );

    write(
        &dir,
        "kinds.rs",
        "mod strategy;\nmod least;\npub use least::Least;\npub use strategy::Strategy;\n",
    );
    write(&dir, "kinds/strategy.rs", "pub trait Strategy {}\n");
    write(
        &dir,
        "kinds/least.rs",
        "use super::strategy::Strategy;\npub struct Least;\nimpl Strategy for Least {}\n",
    );
    assert!(House::read(&dir.join("lib.rs")).circles().is_empty());

    // A face that re-exports a sibling's name is followed to the sibling: no loop through it.
    write(
        &dir,
        "kinds/least.rs",
        "use super::Strategy;\npub struct Least;\nimpl Strategy for Least {}\n",
    );
    assert!(House::read(&dir.join("lib.rs")).circles().is_empty());
    std::fs::remove_dir_all(&dir).ok();
}

/// Two folders that each reach into the other form a loop at the crate's root, even though no
/// two files import each other.
#[test]
fn the_check_finds_a_loop_between_folders() {
    let dir = scratch_dir("folders");
    write(&dir, "lib.rs", "mod a;\nmod b;\n");
    write(&dir, "a/mod.rs", "mod one;\nmod two;\n");
    write(&dir, "a/one.rs", "pub struct One;\n");
    write(
        &dir,
        "a/two.rs",
        "pub fn two() { let _ = crate::b::three::Three; }\n",
    );
    write(&dir, "b/mod.rs", "pub mod three;\nmod four;\n");
    write(&dir, "b/three.rs", "pub struct Three;\n");
    write(&dir, "b/four.rs", "use crate::a::one::One;\n");
    let house = House::read(&dir.join("lib.rs"));
    let circles = house.circles();
    assert_eq!(circles.len(), 1);
    let described = circles[0].describe(&house);
    assert!(
        described.contains("a/") && described.contains("b/"),
        "{described}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardik-layering-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    dir
}

fn write(dir: &Path, file: &str, text: &str) {
    let path = dir.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Reading a crate: its module files, what each defines, re-exports and uses.
// ---------------------------------------------------------------------------------------------

/// One crate's module files and the uses between them.
struct House {
    root: PathBuf,
    files: Vec<ModuleFile>,
    by_module: HashMap<Vec<String>, usize>,
}

struct ModuleFile {
    path: PathBuf,
    /// The module this file is, from the crate root (`[]` for lib.rs).
    module: Vec<String>,
    /// Whether child modules live in files of their own (a folder stands below this file).
    has_child_files: bool,
    tokens: Vec<Token>,
    defines: BTreeSet<String>,
    /// Imported names (`use`, public or not): the name as seen here and the path it came from.
    passes_on: Vec<(String, Vec<String>)>,
    /// `use path::*` paths.
    glob_passes_on: Vec<Vec<String>>,
    /// Every path this file names that may lead into the crate.
    uses: Vec<Vec<String>>,
}

impl House {
    fn read(root_file: &Path) -> House {
        let mut house = House {
            root: root_file.parent().unwrap().to_path_buf(),
            files: Vec::new(),
            by_module: HashMap::new(),
        };
        house.add(root_file.to_path_buf(), Vec::new());
        for file in &mut house.files {
            file.read_items();
        }
        house
    }

    /// Reads one module file and, depth first, the module files it declares.
    fn add(&mut self, path: PathBuf, module: Vec<String>) {
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let tokens = without_test_items(tokenize(&text));
        let children = declared_child_modules(&tokens);
        let index = self.files.len();
        self.by_module.insert(module.clone(), index);
        self.files.push(ModuleFile {
            path: path.clone(),
            module: module.clone(),
            has_child_files: false,
            tokens,
            defines: BTreeSet::new(),
            passes_on: Vec::new(),
            glob_passes_on: Vec::new(),
            uses: Vec::new(),
        });
        // Children of lib.rs, main.rs and mod.rs sit beside them; those of foo.rs in foo/.
        let file_name = path.file_name().unwrap().to_str().unwrap();
        let child_dir = if module.is_empty() || file_name == "mod.rs" {
            path.parent().unwrap().to_path_buf()
        } else {
            path.with_extension("")
        };
        for child in children {
            let flat = child_dir.join(format!("{child}.rs"));
            let nested = child_dir.join(&child).join("mod.rs");
            let child_path = if flat.exists() {
                flat
            } else if nested.exists() {
                nested
            } else {
                // Inline modules (`mod x { .. }`) are read as part of this file.
                continue;
            };
            self.files[index].has_child_files = true;
            let mut child_module = module.clone();
            child_module.push(child);
            self.add(child_path, child_module);
        }
    }

    fn module_exists(&self, module: &[String]) -> bool {
        self.by_module.contains_key(module)
    }

    /// The file a path from `from` (a module) leads to, following re-exports to the file that
    /// defines the name. `None` for paths that leave the crate or name no module.
    fn resolve(&self, from: &[String], path: &[String], depth: usize) -> Option<usize> {
        let (mut module, rest) = self.start_of(from, path)?;
        let mut rest = rest;
        while let Some(first) = rest.first() {
            let mut deeper = module.clone();
            deeper.push(first.clone());
            if !self.module_exists(&deeper) {
                break;
            }
            module = deeper;
            rest = &rest[1..];
        }
        let file = self.by_module[&module];
        let Some(name) = rest.first() else {
            return Some(file);
        };
        // A name taken through a module that defines more than its child modules depends on
        // that module, even where it only re-exports the name: the module's file is what the
        // importer reads. Only a face (a file that declares modules and hands their names on)
        // is seen through, to the file that defines the name.
        if depth > 8 || self.files[file].defines.contains(name) || !self.is_face(file) {
            return Some(file);
        }
        let module_file = &self.files[file];
        for (exported, source) in &module_file.passes_on {
            if exported == name {
                return self.resolve(&module, source, depth + 1).or(Some(file));
            }
        }
        for glob in &module_file.glob_passes_on {
            let mut source = glob.clone();
            source.push(name.clone());
            if let Some(found) = self.resolve(&module, &source, depth + 1)
                && self.files[found].defines.contains(name)
            {
                return Some(found);
            }
        }
        Some(file)
    }

    /// A file that defines nothing but its child modules: it only hands names on.
    fn is_face(&self, file: usize) -> bool {
        let f = &self.files[file];
        f.defines.iter().all(|name| {
            let mut child = f.module.clone();
            child.push(name.clone());
            self.module_exists(&child)
        })
    }

    /// Where a path starts: the module its first segments name, and the segments left.
    fn start_of<'p>(
        &self,
        from: &[String],
        path: &'p [String],
    ) -> Option<(Vec<String>, &'p [String])> {
        let first = path.first()?;
        match first.as_str() {
            "crate" => Some((Vec::new(), &path[1..])),
            "self" => Some((from.to_vec(), &path[1..])),
            "super" => {
                let mut module = from.to_vec();
                let mut rest = path;
                while rest.first().map(String::as_str) == Some("super") {
                    module.pop()?;
                    rest = &rest[1..];
                }
                Some((module, rest))
            }
            _ => {
                // A child module named directly (edition 2018 paths).
                let mut child = from.to_vec();
                child.push(first.clone());
                self.module_exists(&child).then_some((from.to_vec(), path))
            }
        }
    }

    /// Which file uses which, with the names that tie them.
    fn edges(&self) -> BTreeMap<(usize, usize), BTreeSet<String>> {
        let mut edges: BTreeMap<(usize, usize), BTreeSet<String>> = BTreeMap::new();
        for (from, file) in self.files.iter().enumerate() {
            for path in &file.uses {
                if let Some(to) = self.resolve(&file.module, path, 0)
                    && to != from
                {
                    edges.entry((from, to)).or_default().insert(path.join("::"));
                }
            }
        }
        edges
    }

    /// Where a file stands: the folders above it (as module names) and its unit inside the
    /// innermost one. A module file with child files is its folder's own room.
    fn place(&self, file: usize) -> (Vec<String>, String) {
        let f = &self.files[file];
        if f.has_child_files || f.module.is_empty() {
            (f.module.clone(), String::from("(the folder's own file)"))
        } else {
            let (leaf, folders) = f.module.split_last().unwrap();
            (folders.to_vec(), leaf.clone())
        }
    }

    /// The loops between units of one folder, for every folder.
    fn circles(&self) -> Vec<Circle> {
        // Per folder: unit -> unit edges, each with the file edges behind it.
        type UnitEdges = BTreeMap<(String, String), Vec<(usize, usize)>>;
        let mut folders: BTreeMap<Vec<String>, UnitEdges> = BTreeMap::new();
        for &(from, to) in self.edges().keys() {
            let (from_folders, from_room) = self.place(from);
            let (to_folders, to_room) = self.place(to);
            let common = from_folders
                .iter()
                .zip(&to_folders)
                .take_while(|(a, b)| a == b)
                .count();
            let unit = |folders: &[String], room: &str| {
                folders
                    .get(common)
                    .map_or_else(|| room.to_string(), |f| format!("{f}/"))
            };
            let from_unit = unit(&from_folders, &from_room);
            let to_unit = unit(&to_folders, &to_room);
            if from_unit != to_unit {
                folders
                    .entry(from_folders[..common].to_vec())
                    .or_default()
                    .entry((from_unit, to_unit))
                    .or_default()
                    .push((from, to));
            }
        }
        let mut circles = Vec::new();
        for (folder, unit_edges) in folders {
            for component in strongly_connected(&unit_edges) {
                let ties = unit_edges
                    .iter()
                    .filter(|((a, b), _)| component.contains(a) && component.contains(b))
                    .flat_map(|(_, files)| files.iter().copied())
                    .collect();
                circles.push(Circle {
                    folder: folder.clone(),
                    units: component,
                    ties,
                });
            }
        }
        circles
    }
}

/// Units of one folder that import each other in a loop, and the file uses that tie them.
struct Circle {
    folder: Vec<String>,
    units: BTreeSet<String>,
    ties: Vec<(usize, usize)>,
}

impl Circle {
    fn describe(&self, house: &House) -> String {
        let edges = house.edges();
        let mut out = format!(
            "{} in {}: {}\n",
            house.root.display(),
            ["src"]
                .into_iter()
                .chain(self.folder.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join("/"),
            self.units.iter().cloned().collect::<Vec<_>>().join(" <-> "),
        );
        for &(from, to) in &self.ties {
            let relative = |i: usize| {
                house.files[i]
                    .path
                    .strip_prefix(&house.root)
                    .unwrap_or(&house.files[i].path)
                    .display()
                    .to_string()
            };
            let names: Vec<_> = edges[&(from, to)].iter().cloned().collect();
            writeln!(
                out,
                "    {} -> {} ({})",
                relative(from),
                relative(to),
                names.join(", ")
            )
            .unwrap();
        }
        out
    }
}

/// The strongly connected components with more than one unit (Tarjan's algorithm).
fn strongly_connected<T>(edges: &BTreeMap<(String, String), T>) -> Vec<BTreeSet<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        next.entry(a).or_default().push(b);
        next.entry(b).or_default();
    }
    struct Walk<'a> {
        next: &'a BTreeMap<&'a str, Vec<&'a str>>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for &w in &self.next[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.insert(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        next: &next,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for &v in next.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

// ---------------------------------------------------------------------------------------------
// Items of one file.
// ---------------------------------------------------------------------------------------------

const ITEM_KEYWORDS: [&str; 10] = [
    "struct",
    "enum",
    "trait",
    "fn",
    "type",
    "const",
    "static",
    "union",
    "mod",
    "macro_rules",
];

impl ModuleFile {
    fn read_items(&mut self) {
        let tokens = &self.tokens;
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                Token::Ident(word) if word == "use" => {
                    let end = find_semicolon(tokens, i);
                    let mut leaves = Vec::new();
                    use_tree(&tokens[i + 1..end], &mut Vec::new(), &mut leaves);
                    for leaf in leaves {
                        match leaf {
                            UseLeaf::Name { path, as_name } => {
                                // Private imports pass names on too: a child may take a name
                                // from its parent that the parent only imported.
                                self.passes_on.push((as_name, path.clone()));
                                self.uses.push(path);
                            }
                            UseLeaf::Glob(path) => {
                                self.glob_passes_on.push(path.clone());
                                self.uses.push(path);
                            }
                        }
                    }
                    i = end + 1;
                    continue;
                }
                Token::Ident(word) if ITEM_KEYWORDS.contains(&word.as_str()) => {
                    let name_at = if word == "macro_rules" { i + 2 } else { i + 1 };
                    if let Some(Token::Ident(name)) = tokens.get(name_at) {
                        self.defines.insert(name.clone());
                    }
                }
                Token::Ident(_) => {
                    let preceded_by_path =
                        i > 0 && matches!(tokens[i - 1], Token::PathSep | Token::Punct('$'));
                    if !preceded_by_path && matches!(tokens.get(i + 1), Some(Token::PathSep)) {
                        let mut path = Vec::new();
                        let mut j = i;
                        while let Some(Token::Ident(segment)) = tokens.get(j) {
                            path.push(segment.clone());
                            if !matches!(tokens.get(j + 1), Some(Token::PathSep)) {
                                break;
                            }
                            j += 2;
                        }
                        self.uses.push(path);
                        i = j + 1;
                        continue;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

enum UseLeaf {
    Name { path: Vec<String>, as_name: String },
    Glob(Vec<String>),
}

/// Expands a use tree (`a::{b, c::d as e, f::*}`) into its leaves.
fn use_tree(tokens: &[Token], prefix: &mut Vec<String>, leaves: &mut Vec<UseLeaf>) {
    let depth_at_start = prefix.len();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::PathSep => {}
            Token::Ident(word) if word == "as" => {
                if let Some(Token::Ident(alias)) = tokens.get(i + 1) {
                    leaves.push(UseLeaf::Name {
                        path: prefix.clone(),
                        as_name: alias.clone(),
                    });
                }
                prefix.truncate(depth_at_start);
                return;
            }
            Token::Ident(segment) => prefix.push(segment.clone()),
            Token::Punct('*') => {
                leaves.push(UseLeaf::Glob(prefix.clone()));
                prefix.truncate(depth_at_start);
                return;
            }
            Token::Punct('{') => {
                let close = matching_close(tokens, i);
                for part in split_top_level_commas(&tokens[i + 1..close]) {
                    use_tree(part, prefix, leaves);
                }
                prefix.truncate(depth_at_start);
                return;
            }
            _ => {}
        }
        i += 1;
    }
    if prefix.len() > depth_at_start {
        let name = prefix.last().unwrap().clone();
        // `use foo::{self}` names `foo` itself.
        let path: Vec<String> = if name == "self" {
            prefix[..prefix.len() - 1].to_vec()
        } else {
            prefix.clone()
        };
        let as_name = path.last().cloned().unwrap_or_default();
        leaves.push(UseLeaf::Name { path, as_name });
    }
    prefix.truncate(depth_at_start);
}

fn split_top_level_commas(tokens: &[Token]) -> Vec<&[Token]> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => depth -= 1,
            Token::Punct(',') if depth == 0 => {
                parts.push(&tokens[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&tokens[start..]);
    parts
}

fn find_semicolon(tokens: &[Token], from: usize) -> usize {
    (from..tokens.len())
        .find(|&i| matches!(tokens[i], Token::Punct(';')))
        .unwrap_or(tokens.len())
}

fn matching_close(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::Punct('{' | '(' | '[') => depth += 1,
            Token::Punct('}' | ')' | ']') => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

/// `mod name;` declarations (not inline modules).
fn declared_child_modules(tokens: &[Token]) -> Vec<String> {
    let mut children = Vec::new();
    for window in tokens.windows(3) {
        if let [Token::Ident(m), Token::Ident(name), Token::Punct(';')] = window
            && m == "mod"
        {
            children.push(name.clone());
        }
    }
    children
}

/// Drops every item under `#[cfg(test)]` (or `#[cfg(all(test, ..))]`): tests may reach
/// anywhere, and their files are not part of the layering.
fn without_test_items(tokens: Vec<Token>) -> Vec<Token> {
    let mut kept = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        if matches!(tokens[i], Token::Punct('#'))
            && matches!(tokens.get(i + 1), Some(Token::Punct('[')))
        {
            let close = matching_close(&tokens, i + 1);
            if is_test_cfg(&tokens[i + 2..close]) {
                i = end_of_item(&tokens, close + 1);
                continue;
            }
        }
        kept.push(tokens[i].clone());
        i += 1;
    }
    kept
}

fn is_test_cfg(attribute: &[Token]) -> bool {
    let words: Vec<&str> = attribute
        .iter()
        .filter_map(|t| match t {
            Token::Ident(w) => Some(w.as_str()),
            _ => None,
        })
        .collect();
    matches!(
        words.as_slice(),
        ["cfg", "test"] | ["cfg", "all", "test", ..]
    )
}

/// The index just past the item that starts at `from` (after its attributes).
fn end_of_item(tokens: &[Token], mut from: usize) -> usize {
    // Further attributes of the same item.
    while matches!(tokens.get(from), Some(Token::Punct('#'))) {
        from = matching_close(tokens, from + 1) + 1;
    }
    let ends_at_semicolon = tokens[from..]
        .iter()
        .take(4)
        .any(|t| matches!(t, Token::Ident(w) if ["use", "const", "static", "type"].contains(&w.as_str())));
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(from) {
        match token {
            Token::Punct('{' | '(' | '[') => depth += 1,
            // The end of the enclosing list or block: the item was a field, an argument or the
            // last expression of a block.
            Token::Punct('}' | ')' | ']') if depth == 0 => return i,
            Token::Punct(')' | ']') => depth -= 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 && !ends_at_semicolon {
                    return i + 1;
                }
            }
            // A field or a match arm ends at a comma; a statement or a declaration at `;`.
            Token::Punct(',' | ';') if depth == 0 => return i + 1,
            _ => {}
        }
    }
    tokens.len()
}

// ---------------------------------------------------------------------------------------------
// Tokens: identifiers, `::` and punctuation; comments and literals dropped.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_string(&chars, i + 1);
        } else if (c == 'r' || c == 'b') && raw_string_hashes(&chars, i).is_some() {
            let (hashes, quote_at) = raw_string_hashes(&chars, i).unwrap();
            let mut j = quote_at + 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"'
                    && chars[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes
                {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
        } else if c == 'b' && next == Some('"') {
            i = skip_string(&chars, i + 2);
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                // Past the escaped character, so that '\'' ends where it should.
                let mut j = i + 3;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c == 'b' && next == Some('\'') {
            let mut j = i + 2;
            if chars.get(j) == Some(&'\\') {
                j += 2;
            }
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            i = j + 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // `r#type` is the identifier `type`.
            tokens.push(Token::Ident(word));
        } else if c.is_ascii_digit() {
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.')
            {
                if chars[i] == '.' && !chars.get(i + 1).is_some_and(char::is_ascii_digit) {
                    break;
                }
                i += 1;
            }
        } else if c == ':' && next == Some(':') {
            tokens.push(Token::PathSep);
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            tokens.push(Token::Punct(c));
            i += 1;
        }
    }
    tokens
}

/// For `r"..."`, `r#"..."#`, `br#"..."#`: the number of hashes and where the quote is.
fn raw_string_hashes(chars: &[char], at: usize) -> Option<(usize, usize)> {
    let mut i = at;
    if chars[i] == 'b' {
        i += 1;
    }
    if chars.get(i) != Some(&'r') {
        return None;
    }
    // Not the tail of an identifier such as `for` or `bar`.
    if at > 0 && (chars[at - 1].is_alphanumeric() || chars[at - 1] == '_') {
        return None;
    }
    i += 1;
    let mut hashes = 0;
    while chars.get(i) == Some(&'#') {
        hashes += 1;
        i += 1;
    }
    (chars.get(i) == Some(&'"')).then_some((hashes, i))
}

fn skip_string(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}
