//! The configuration reference, rendered from the table of [`super::keys`]: Markdown for
//! `docs/configuration.md` (`sprayswitch config-reference`) and TOML with each key annotated
//! (`sprayswitch show-config`).
//!
//! Annotating adds comment lines only, so the TOML reads back as the same configuration.

use super::keys::{self, Form, Key, Range, Section, WhenUnset, SECTIONS};
use super::DEFAULT_CONFIG;

/// Width that annotation comments wrap at.
const COMMENT_WIDTH: usize = 100;

/// Where the reference lives, from the repository's root.
pub const REFERENCE_PATH: &str = "docs/configuration.md";

/// The whole reference as Markdown: an introduction, then one table per section (key, type,
/// default, range, meaning).
pub fn markdown() -> String {
    let mut out = String::new();
    out.push_str(
        "# Configuration reference\n\
         \n\
         <!-- Generated from control/src/config/keys.rs by `sprayswitch config-reference`: \
         edit the table there, not this file. -->\n\
         \n\
         `sprayswitch` reads one TOML file: `sprayswitch run --config FILE`, or without \
         `--config` the embedded default (ToR `tor-a` of the demo rack pair), which \
         `sprayswitch show-config` prints with these notes above each key. \
         `sprayswitch check --config FILE` validates a file and prints what it describes. \
         Every problem is reported before anything starts, as `field: reason` \
         (`port[2].mtu: 20000: use 68 to 9000`); a key that is not listed here is an error.\n\
         \n\
         Columns: *Default* is what holds when the key is absent (*required*: the file must \
         give it); *Range* is what validation accepts, with any tie to other keys after a \
         `;`.\n",
    );
    for s in SECTIONS {
        out.push_str(&format!("\n## {}\n\n{}\n\n", heading(s), s.about));
        out.push_str("| Key | Type | Default | Range | Meaning |\n");
        out.push_str("| --- | --- | --- | --- | --- |\n");
        for k in s.keys {
            let cells = [
                format!("`{}`", k.name),
                k.ty.to_string(),
                match k.default {
                    WhenUnset::Required => "*required*".to_string(),
                    WhenUnset::Value(v) => format!("`{}`", v()),
                    WhenUnset::Means(text) => text.to_string(),
                },
                markdown_range(k),
                k.meaning.to_string(),
            ];
            let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
    }
    out
}

/// A section's heading: how the file writes it, and for an inline table the sections it sits
/// in (`ecn = { ... }` in `[switch]` or `[[port]]`).
fn heading(s: &Section) -> String {
    if s.form != Form::Inline {
        return format!("`{}`", s.header);
    }
    let parents: Vec<String> = SECTIONS
        .iter()
        .filter(|p| p.keys.iter().any(|k| k.opens == Some(s.name)))
        .map(|p| format!("`{}`", p.header))
        .collect();
    format!("`{}` in {}", s.header, parents.join(" or "))
}

/// The range cell: choices as code (`"off"`), then what the key requires of others.
fn markdown_range(k: &Key) -> String {
    let range = match k.range {
        Range::Choices(names) => {
            let names: Vec<String> = names.iter().map(|n| format!("`\"{n}\"`")).collect();
            match names.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
                _ => names.join(""),
            }
        }
        r => r.to_string(),
    };
    match (k.range, k.requires) {
        (_, "") => range,
        (Range::Any, req) => req.to_string(),
        (_, req) => format!("{range}; {req}"),
    }
}

/// The annotation of a key: `type, default, range: meaning` (no range when any value goes).
pub fn annotation(k: &Key) -> String {
    let default = match k.default {
        WhenUnset::Required => "required".to_string(),
        WhenUnset::Value(v) => format!("default {}", v()),
        WhenUnset::Means(text) => format!("unset: {text}"),
    };
    let range = k.range_text();
    if range == "any" {
        format!("{}, {default}: {}", k.ty, k.meaning)
    } else {
        format!("{}, {default}, {range}: {}", k.ty, k.meaning)
    }
}

/// `text` (a configuration file) with each key it sets annotated from the reference: a
/// comment above it with [`annotation`], and for an inline table (`health = { ... }`) one for
/// each key it holds. Keys the reference does not know, and lines that are not a `key = value`
/// at the start of a line, stay as they are.
pub fn annotate(text: &str) -> String {
    let mut out = String::new();
    let mut section: Option<&Section> = None;
    for line in text.lines() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        if let Some(name) = table_header(body) {
            section = keys::section(name).filter(|s| s.form != Form::Inline);
        } else if let Some(k) = key_name(body).and_then(|n| section?.key(n)) {
            comment(&mut out, indent, "", &annotation(k));
            for (sub, sk) in inline_keys(body, k) {
                comment(
                    &mut out,
                    indent,
                    "  ",
                    &format!("{sub}: {}", annotation(sk)),
                );
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The embedded default, annotated.
pub fn annotated_default() -> String {
    let mut out = String::new();
    comment(
        &mut out,
        "",
        "",
        "sprayswitch's embedded default configuration. Above each key: its type, default, range \
         and meaning, from the configuration reference (docs/configuration.md, written by \
         `sprayswitch config-reference`).",
    );
    out.push('\n');
    out.push_str(&annotate(DEFAULT_CONFIG));
    out
}

/// The name of the table a `[name]` or `[[name]]` line opens.
fn table_header(body: &str) -> Option<&str> {
    let rest = body.strip_prefix('[')?;
    let rest = rest.strip_prefix('[').unwrap_or(rest);
    let end = rest.find(']')?;
    Some(rest[..end].trim())
}

/// The bare key a `key = value` line sets.
fn key_name(body: &str) -> Option<&str> {
    let (key, _) = body.split_once('=')?;
    let key = key.trim_end();
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    bare.then_some(key)
}

/// The keys of the inline table a one-line `key = { ... }` sets, in the reference's order.
fn inline_keys(body: &str, k: &Key) -> Vec<(&'static str, &'static Key)> {
    let Some(sub) = k.opens.and_then(keys::section) else {
        return Vec::new();
    };
    let Ok(line) = toml::from_str::<toml::Table>(body) else {
        return Vec::new();
    };
    let Some(toml::Value::Table(value)) = line.get(k.name) else {
        return Vec::new();
    };
    sub.keys
        .iter()
        .filter(|sk| value.contains_key(sk.name))
        .map(|sk| (sk.name, sk))
        .collect()
}

/// Appends `text` as comment lines wrapped at [`COMMENT_WIDTH`]: `indent# lead text`, the
/// following lines indented two more.
fn comment(out: &mut String, indent: &str, lead: &str, text: &str) {
    let first = format!("{indent}# {lead}");
    let next = format!("{indent}# {lead}  ");
    let mut line = first.clone();
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.len() + 1 + word.len() > COMMENT_WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = next.clone();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(&line);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn the_annotated_default_reads_back_as_the_default() {
        let annotated = annotated_default();
        let back = Config::parse(&annotated, "<annotated default>").unwrap();
        assert_eq!(back, Config::default_config());
    }

    #[test]
    fn every_key_of_the_default_is_annotated() {
        let annotated = annotated_default();
        let lines: Vec<&str> = annotated.lines().collect();
        let mut keys = 0;
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with('#') || table_header(line).is_some() {
                continue;
            }
            let Some(name) = key_name(line) else { continue };
            keys += 1;
            // The line above the annotation's continuation lines (`#   `) starts it.
            let first = lines[..i].iter().rev().find(|l| !l.starts_with("#   "));
            assert!(
                first.is_some_and(|l| SECTIONS
                    .iter()
                    .flat_map(|s| s.keys)
                    .any(|k| k.name == name && l.starts_with(&format!("# {},", k.ty)))),
                "`{line}` has no annotation above it:\n{}",
                lines[i.saturating_sub(4)..=i].join("\n")
            );
        }
        assert!(keys > 30, "only {keys} keys found");
        assert!(annotated.contains("#   peers: array of strings, required"));
    }

    #[test]
    fn annotations_wrap_and_keep_the_line_they_annotate() {
        let text = "[switch]\n  workers = 2 # two\nunknown = 1\n[[port]]\nname = \"a\"\n";
        let out = annotate(text);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[1].starts_with("  # integer, default 1, 1 to 64: Worker threads."));
        assert!(out.contains("  workers = 2 # two\nunknown = 1\n"), "{out}");
        assert!(out.contains("# string, required, 1 to 32 letters"), "{out}");
        assert!(lines.iter().all(|l| l.len() <= COMMENT_WIDTH), "{out}");
    }

    #[test]
    fn the_markdown_has_a_table_per_section_and_a_row_per_key() {
        let md = markdown();
        for s in SECTIONS {
            assert!(md.contains(&format!("\n## {}\n", heading(s))), "{}", s.name);
        }
        let rows = md.lines().filter(|l| l.starts_with("| `")).count();
        let keys: usize = SECTIONS.iter().map(|s| s.keys.len()).sum();
        assert_eq!(rows, keys);
        assert!(md.contains("\n## `ecn = { ... }` in `[switch]` or `[[port]]`\n"));
        assert!(
            md.contains("| `workers` | integer | `1` | 1 to 64 |"),
            "{md}"
        );
    }
}
