//! The dataplane crate's layering, read from its sources: `lib.rs` lists the modules from the
//! top layer down, and a module may import only modules listed after it; inside `reorder/`,
//! the parts import each other without a circle. A module's own tests count as the module.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dataplane/src")
}

/// The source of a module, a file or a folder, with comment lines left out.
fn module_text(path: &Path) -> String {
    let mut files = Vec::new();
    if path.is_dir() {
        let mut stack = vec![path.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    files.push(p);
                }
            }
        }
    } else {
        files.push(path.with_extension("rs"));
    }
    let mut text = String::new();
    for f in files {
        for line in fs::read_to_string(&f).unwrap().lines() {
            if !line.trim_start().starts_with("//") {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    text
}

/// The first names after each `prefix` in `text`: `prefix::name` and each top-level name of
/// `prefix::{a::x, b, c::{..}}`.
fn names_after(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(head(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 || c != '{' {
                    item.push(c);
                }
            }
            out.insert(head(&item));
        } else {
            out.insert(head(rest));
        }
    }
    out.remove("");
    out
}

fn head(s: &str) -> String {
    s.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

#[test]
fn dataplane_modules_import_only_modules_listed_after_them_in_lib_rs() {
    let lib = fs::read_to_string(src().join("lib.rs")).unwrap();
    let order: Vec<String> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';').to_string())
        .collect();
    assert!(order.len() > 10, "lib.rs lists its modules: {order:?}");
    let mut wrong = Vec::new();
    for (i, m) in order.iter().enumerate() {
        let path = src().join(m);
        let used = names_after(&module_text(&path), "crate::");
        for u in &used {
            if let Some(j) = order.iter().position(|o| o == u) {
                if j < i {
                    wrong.push(format!("{m} imports {u}, listed above it"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn reorder_parts_import_each_other_without_a_circle() {
    let dir = src().join("reorder");
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        if name == "mod" || name == "tests" {
            continue;
        }
        let text = module_text(&p.with_extension(""));
        let mut used = names_after(&text, "super::");
        used.extend(names_after(&text, "crate::reorder::"));
        used.remove(&name);
        deps.insert(name, used);
    }
    let parts: BTreeSet<String> = deps.keys().cloned().collect();
    for d in deps.values_mut() {
        d.retain(|x| parts.contains(x));
    }
    assert!(
        deps.len() >= 10,
        "reorder/ has its parts: {:?}",
        deps.keys()
    );
    // Kahn: repeatedly take the parts that import nothing left.
    let mut left = deps.clone();
    while !left.is_empty() {
        let free: Vec<String> = left
            .iter()
            .filter(|(_, d)| d.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        assert!(!free.is_empty(), "an import circle among {:?}", left);
        for f in &free {
            left.remove(f);
        }
        for d in left.values_mut() {
            for f in &free {
                d.remove(f);
            }
        }
    }
}

#[test]
fn the_reader_finds_names_in_groups_and_paths() {
    let t = "use crate::{a::X, b, c::{d, e}};\nlet x = crate::f::g();\nmycrate::h";
    let got: Vec<String> = names_after(t, "crate::").into_iter().collect();
    assert_eq!(got, ["a", "b", "c", "f"]);
}
