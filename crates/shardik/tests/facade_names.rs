//! The facade check: every type that a public signature of `shardik` names can be named by a
//! user through `shardik::` itself.
//!
//! A signature that names a type the facade does not export (a method returning a struct from
//! a private module of the runtime, a trait bound on a core type) leaves the user with a value
//! they cannot write the type of, store in a field of their own, or match on. This test finds
//! such names from the compiler's own view of the API: it has rustdoc write the JSON
//! description of our crates (`--output-format json`, still unstable, hence `RUSTC_BOOTSTRAP`
//! for that one nested build), collects what the curated surface (`shardik_runtime::facade`,
//! which `shardik` re-exports whole) makes nameable, and walks the signatures of all of it:
//! fields, variants, function parameters and results, bounds, trait items and the items of
//! inherent and trait impls. It fails with the list of names a user cannot reach.
//!
//! `shardik::advanced` does not count: it is reachable, but without a semver promise, so a
//! curated signature that needs it would pull an unpromised type into a promised API.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Our crates whose items can appear in the facade's signatures, by crate name and package.
const OUR_CRATES: &[(&str, &str)] = &[
    ("shardik_runtime", "shardik-runtime"),
    ("shardik_core", "shardik-core"),
    ("shardik_persistence", "shardik-persistence"),
    ("shardik_passivation", "shardik-passivation"),
    ("shardik_config", "shardik-config"),
    ("shardik_wire", "shardik-wire"),
];

/// Crates every Rust program can name without a dependency of its own.
const LANGUAGE_CRATES: &[&str] = &["std", "core", "alloc"];

/// Crates whose names in our signatures are the user's own vocabulary, not ours to export:
/// an application that derives `Serialize` for its commands depends on serde itself, and one
/// that runs a node runs it on tokio (`#[tokio::main]`). Both promise 1.x stability, so naming
/// them does not tie a user to a version we pick.
const USER_VOCABULARY_CRATES: &[&str] = &["serde", "serde_core", "tokio"];

/// Crates whose items a re-exported crate re-exports in turn, as `(crate, through)`: axum
/// re-exports `http` (`axum::http`) and axum-core's responses (`axum::response`), so with
/// `shardik::axum` a user names them at the version the management API uses.
const NAMED_THROUGH: &[(&str, &str)] = &[("http", "axum"), ("axum_core", "axum")];

#[test]
fn every_type_in_the_facades_signatures_can_be_named_through_shardik() {
    let docs = Docs::build();
    let surface = docs.nameable_surface();
    assert!(
        surface.paths.len() > 100,
        "the surface looks empty ({} items): did the walk of `shardik_runtime::facade` fail?",
        surface.paths.len()
    );

    let mut leaks: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut checked = 0;
    for (path, (crate_name, id)) in &surface.items {
        let mut named = Vec::new();
        docs.names_in_signature(crate_name, id, &mut named, &mut HashSet::new());
        checked += 1;
        for name in named {
            if !surface.can_name(&name) {
                leaks.entry(name).or_default().insert(path.clone());
            }
        }
    }
    println!("checked the signatures of {checked} items of the facade");
    let report: Vec<String> = leaks
        .iter()
        .map(|(leak, users)| {
            let users: Vec<&str> = users.iter().map(String::as_str).take(4).collect();
            format!("  {leak}\n      named by {}", users.join(", "))
        })
        .collect();
    assert!(
        leaks.is_empty(),
        "{} types are named by the facade's public signatures but cannot be named through \
         `shardik::` (export them from `shardik_runtime::facade`, or keep them out of the \
         signature):\n{}",
        leaks.len(),
        report.join("\n")
    );
}

/// The rustdoc JSON of each of our crates, by crate name.
struct Docs {
    crates: HashMap<String, Value>,
}

/// What a user can name through `shardik::`.
struct Surface {
    /// Canonical paths (where each item is defined) of the items the facade re-exports.
    paths: HashSet<String>,
    /// Other crates the facade re-exports whole: everything in them is nameable.
    whole_crates: HashSet<String>,
    /// The items whose signatures are the facade's, by canonical path: crate and local id.
    items: BTreeMap<String, (String, String)>,
}

impl Surface {
    fn can_name(&self, path: &str) -> bool {
        let crate_name = path.split("::").next().unwrap_or_default();
        LANGUAGE_CRATES.contains(&crate_name)
            || USER_VOCABULARY_CRATES.contains(&crate_name)
            || self.whole_crates.contains(crate_name)
            || NAMED_THROUGH.iter().any(|(named, through)| {
                *named == crate_name && self.whole_crates.contains(*through)
            })
            || self.paths.contains(path)
    }
}

impl Docs {
    /// Has rustdoc describe each of our crates with every feature on (as docs.rs builds the
    /// facade), in a target directory of its own so that the outer build's is left alone.
    fn build() -> Docs {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace.join("target"))
            .join("facade-check");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let mut crates = HashMap::new();
        for (crate_name, package) in OUR_CRATES {
            let status = Command::new(&cargo)
                .current_dir(&workspace)
                .env("CARGO_TARGET_DIR", &target)
                .env("RUSTC_BOOTSTRAP", "1")
                .args([
                    "rustdoc",
                    "--quiet",
                    "--locked",
                    "--all-features",
                    "-p",
                    package,
                ])
                .args(["--", "-Zunstable-options", "--output-format", "json"])
                .status()
                .expect("run cargo rustdoc");
            assert!(status.success(), "cargo rustdoc -p {package} failed");
            let file = target.join("doc").join(format!("{crate_name}.json"));
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
            let json: Value = serde_json::from_str(&text).expect("rustdoc JSON parses");
            crates.insert((*crate_name).to_owned(), json);
        }
        Docs { crates }
    }

    fn json(&self, crate_name: &str) -> &Value {
        &self.crates[crate_name]
    }

    fn item<'a>(&'a self, crate_name: &str, id: &str) -> Option<&'a Value> {
        self.json(crate_name)["index"].get(id)
    }

    /// Where an id of `crate_name`'s JSON is defined: its crate and canonical path.
    fn canonical_path(&self, crate_name: &str, id: &str) -> Option<String> {
        let json = self.json(crate_name);
        let summary = json["paths"].get(id)?;
        let path: Vec<&str> = summary["path"]
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        Some(path.join("::"))
    }

    /// Finds a canonical path's item in the JSON of the crate that defines it.
    fn find(&self, path: &str) -> Option<(String, String)> {
        let crate_name = path.split("::").next()?;
        let json = self.crates.get(crate_name)?;
        let paths = json["paths"].as_object()?;
        paths.iter().find_map(|(id, summary)| {
            let local = summary["crate_id"].as_u64() == Some(0);
            let same = summary["path"]
                .as_array()
                .map(|p| {
                    p.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("::")
                })
                .is_some_and(|p| p == path);
            (local && same && json["index"].get(id).is_some())
                .then(|| (crate_name.to_owned(), id.clone()))
        })
    }

    /// Resolves an id seen in `crate_name`'s JSON to the defining crate's own id for it.
    fn resolve(&self, crate_name: &str, id: &str) -> Option<(String, String)> {
        if self.item(crate_name, id).is_some() {
            return Some((crate_name.to_owned(), id.to_owned()));
        }
        self.find(&self.canonical_path(crate_name, id)?)
    }

    /// Walks `shardik_runtime::facade`: its re-exports, globs and inline modules.
    fn nameable_surface(&self) -> Surface {
        let (crate_name, facade) = self
            .find("shardik_runtime::facade")
            .expect("shardik_runtime::facade is in the runtime's JSON");
        let mut surface = Surface {
            paths: HashSet::new(),
            whole_crates: HashSet::new(),
            items: BTreeMap::new(),
        };
        self.add_module_items(&crate_name, &facade, &mut surface, &mut HashSet::new());
        surface
    }

    fn add_module_items(
        &self,
        crate_name: &str,
        module: &str,
        surface: &mut Surface,
        seen: &mut HashSet<(String, String)>,
    ) {
        if !seen.insert((crate_name.to_owned(), module.to_owned())) {
            return;
        }
        let Some(items) = self
            .item(crate_name, module)
            .and_then(|m| m["inner"]["module"]["items"].as_array())
        else {
            return;
        };
        for id in items.iter().map(id_text) {
            self.add_item(crate_name, &id, surface, seen);
        }
    }

    fn add_item(
        &self,
        crate_name: &str,
        id: &str,
        surface: &mut Surface,
        seen: &mut HashSet<(String, String)>,
    ) {
        let Some(item) = self.item(crate_name, id) else {
            return;
        };
        let inner = &item["inner"];
        if let Some(reexport) = inner.get("use") {
            let Some(target) = reexport.get("id").filter(|t| !t.is_null()).map(id_text) else {
                return;
            };
            match self.resolve(crate_name, &target) {
                Some((target_crate, target_id)) => {
                    if reexport["is_glob"].as_bool() == Some(true) {
                        self.add_module_items(&target_crate, &target_id, surface, seen);
                    } else {
                        self.add_item(&target_crate, &target_id, surface, seen);
                    }
                }
                // Another crate than ours, re-exported: a whole crate, or one of its items.
                None => {
                    if let Some(path) = self.canonical_path(crate_name, &target) {
                        if self.json(crate_name)["paths"][&target]["kind"] == "module"
                            && !path.contains("::")
                        {
                            surface.whole_crates.insert(path);
                        } else {
                            surface.paths.insert(path);
                        }
                    }
                }
            }
            return;
        }
        if inner.get("module").is_some() {
            self.add_module_items(crate_name, id, surface, seen);
            return;
        }
        if let Some(path) = self.canonical_path(crate_name, id) {
            surface.paths.insert(path.clone());
            surface
                .items
                .insert(path, (crate_name.to_owned(), id.to_owned()));
        }
    }

    /// The canonical paths of the types and traits `id`'s public signature names: its own,
    /// and those of its fields, variants, trait items and impls.
    fn names_in_signature(
        &self,
        crate_name: &str,
        id: &str,
        named: &mut Vec<String>,
        seen: &mut HashSet<String>,
    ) {
        if !seen.insert(id.to_owned()) {
            return;
        }
        let Some(item) = self.item(crate_name, id) else {
            return;
        };
        let inner = &item["inner"];
        if let Some(implementation) = inner.get("impl") {
            // Auto-trait impls and blanket impls are the compiler's and std's, not ours.
            if implementation["is_synthetic"] == true || !implementation["blanket_impl"].is_null() {
                return;
            }
        }
        self.paths_in(crate_name, inner, named);
        let members = ["fields", "variants", "items"];
        for kind in inner.as_object().into_iter().flat_map(|o| o.values()) {
            for (key, value) in kind.as_object().into_iter().flatten() {
                if members.contains(&key.as_str()) {
                    self.walk_ids(crate_name, value, named, seen);
                } else if key == "impls" {
                    // rustdoc also lists under a type the impls that merely name it (an impl
                    // of `Trait<ThisType>` for another type): only its own are its signature.
                    let own = value.as_array().into_iter().flatten().filter(|impl_id| {
                        self.item(crate_name, &id_text(impl_id))
                            .is_some_and(|i| mentions_id(&i["inner"]["impl"]["for"], id))
                    });
                    for impl_id in own {
                        self.names_in_signature(crate_name, &id_text(impl_id), named, seen);
                    }
                } else if key == "kind" {
                    // A struct's fields sit in `kind: {plain: {fields}}` or `{tuple: [..]}`;
                    // a variant's in `kind: {plain: {fields}}` or `{tuple: [..]}`.
                    for shape in value.as_object().into_iter().flat_map(|o| o.values()) {
                        match shape {
                            Value::Array(_) => self.walk_ids(crate_name, shape, named, seen),
                            Value::Object(o) => {
                                if let Some(fields) = o.get("fields") {
                                    self.walk_ids(crate_name, fields, named, seen);
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
    }

    fn walk_ids(
        &self,
        crate_name: &str,
        ids: &Value,
        named: &mut Vec<String>,
        seen: &mut HashSet<String>,
    ) {
        for id in ids
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| !v.is_null())
        {
            self.names_in_signature(crate_name, &id_text(id), named, seen);
        }
    }

    /// Every path (`{path, id, args}`) in a signature: types, trait bounds, impl traits.
    /// Item ids (integers) are not followed here; `names_in_signature` does that.
    fn paths_in(&self, crate_name: &str, value: &Value, named: &mut Vec<String>) {
        match value {
            Value::Object(object) => {
                if let (Some(Value::String(written)), Some(id)) =
                    (object.get("path"), object.get("id"))
                {
                    let path = self
                        .canonical_path(crate_name, &id_text(id))
                        .unwrap_or_else(|| format!("{written} (no public path)"));
                    named.push(path);
                }
                for value in object.values() {
                    self.paths_in(crate_name, value, named);
                }
            }
            Value::Array(values) => {
                for value in values {
                    self.paths_in(crate_name, value, named);
                }
            }
            _ => {}
        }
    }
}

/// Whether a type mentions the item `id` anywhere (`Wrapper<Self>` mentions `Self`'s id).
fn mentions_id(ty: &Value, id: &str) -> bool {
    match ty {
        Value::Object(object) => {
            object.get("id").is_some_and(|found| id_text(found) == id)
                || object.values().any(|value| mentions_id(value, id))
        }
        Value::Array(values) => values.iter().any(|value| mentions_id(value, id)),
        _ => false,
    }
}

fn id_text(id: &Value) -> String {
    match id {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}
