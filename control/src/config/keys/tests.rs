//! The table against the model: its keys are the serde fields, its defaults what omitting a
//! key gives, its ranges what validation accepts, its choices what the parsers read.
//!
//! Defaults, ranges and choices are probed through the whole parse and validation, in
//! configurations built around the embedded default ([`contexts`]): a key is set (or removed)
//! in its section and the outcome compared.

use std::collections::BTreeSet;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use sprayswitch::tables::SprayPolicy;

use super::*;
use crate::config::{
    Config, ConfigError, EcnThresholds, GroupSection, HealthSection, NeighborSection, PortSection,
    RouteSection, DEFAULT_CONFIG,
};

/// The field names serde's derive hands `deserialize_struct`: with `deny_unknown_fields`,
/// exactly the keys the parser accepts.
fn serde_fields<T: for<'de> Deserialize<'de>>() -> BTreeSet<&'static str> {
    let mut fields = None;
    let _ = T::deserialize(FieldNames(&mut fields));
    let fields = fields.expect("a plain struct (no flatten, no untagged enum)");
    fields.iter().copied().collect()
}

/// A deserializer that only records the fields of the struct asked for.
struct FieldNames<'a>(&'a mut Option<&'static [&'static str]>);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(fields);
        Err(de::Error::custom("fields recorded"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The struct behind each section of the table.
fn model(section: &str) -> Option<BTreeSet<&'static str>> {
    Some(match section {
        "switch" => serde_fields::<SwitchSection>(),
        "reorder" => serde_fields::<ReorderSection>(),
        "port" => serde_fields::<PortSection>(),
        "ecn" => serde_fields::<EcnThresholds>(),
        "uplink_group" => serde_fields::<GroupSection>(),
        "uplink_group.health" => serde_fields::<HealthSection>(),
        "route" => serde_fields::<RouteSection>(),
        "neighbor" => serde_fields::<NeighborSection>(),
        "dpdk" => serde_fields::<DpdkSection>(),
        _ => return None,
    })
}

#[test]
fn the_table_lists_every_key_of_the_model_and_no_other() {
    let sections: BTreeSet<&str> = SECTIONS
        .iter()
        .filter(|s| s.form != Form::Inline)
        .map(|s| s.name)
        .collect();
    assert_eq!(
        serde_fields::<Config>(),
        sections,
        "the sections of Config (left) and of the table in control/src/config/keys.rs (right)"
    );
    for s in SECTIONS {
        let fields = model(s.name).unwrap_or_else(|| {
            panic!(
                "section {} of the table has no struct in model(): add it",
                s.name
            )
        });
        let keys: BTreeSet<&str> = s.keys.iter().map(|k| k.name).collect();
        assert_eq!(
            keys.len(),
            s.keys.len(),
            "a key of {} is listed twice",
            s.name
        );
        let missing: Vec<_> = fields.difference(&keys).collect();
        let unknown: Vec<_> = keys.difference(&fields).collect();
        assert!(
            missing.is_empty() && unknown.is_empty(),
            "{}: fields of the model missing from the table in control/src/config/keys.rs: \
             {missing:?}; keys of the table the model does not have: {unknown:?}",
            s.header
        );
        for k in s.keys {
            let opens = k.opens.and_then(section);
            assert_eq!(
                k.ty.contains("inline table"),
                opens.is_some_and(|o| o.form == Form::Inline),
                "{} {}: an inline table's key names the section of its keys",
                s.header,
                k.name
            );
        }
    }
    for s in SECTIONS.iter().filter(|s| s.form == Form::Inline) {
        let parent = SECTIONS.iter().flat_map(|p| p.keys);
        assert!(
            parent.clone().any(|k| k.opens == Some(s.name)),
            "{}",
            s.name
        );
    }
}

/// A configuration to probe a section's keys in: the document, where the section's table is
/// (a key, and an index for an array of tables), and the path validation names it by.
#[derive(Clone)]
struct Context {
    doc: toml::Table,
    path: Vec<(&'static str, Option<usize>)>,
    field: String,
}

impl Context {
    /// The document with `key` set to `value`, or removed.
    fn with(&self, key: &str, value: Option<toml::Value>) -> toml::Table {
        let mut doc = self.doc.clone();
        let mut table = &mut doc;
        for (name, index) in &self.path {
            let v = table
                .entry(name.to_string())
                .or_insert_with(|| toml::Table::new().into());
            let v = match index {
                Some(i) => &mut v.as_array_mut().expect("an array of tables")[*i],
                None => v,
            };
            table = v.as_table_mut().expect("a table");
        }
        match value {
            Some(v) => table.insert(key.to_string(), v),
            None => table.remove(key),
        };
        doc
    }

    /// The key's value now, if set.
    fn current(&self, key: &str) -> Option<toml::Value> {
        let mut v = toml::Value::Table(self.doc.clone());
        for (name, index) in &self.path {
            v = v.get(name)?.clone();
            if let Some(i) = index {
                v = v.get(*i)?.clone();
            }
        }
        v.get(key).cloned()
    }
}

fn table(text: &str) -> toml::Table {
    toml::from_str(text).expect("test TOML")
}

fn push(doc: &mut toml::Table, array: &str, entry: &str) -> usize {
    let a = doc
        .entry(array)
        .or_insert_with(|| toml::Value::Array(Vec::new()))
        .as_array_mut()
        .expect("an array of tables");
    a.push(table(entry).into());
    a.len() - 1
}

/// The embedded default with a rate on every port (for `ecn = "for_rate"`) and weights on its
/// group (so that a probe of `weights` has one per member).
fn base() -> toml::Table {
    let mut doc = table(DEFAULT_CONFIG);
    for p in doc["port"].as_array_mut().expect("ports") {
        p.as_table_mut()
            .expect("a port")
            .insert("rate_gbps".into(), 100.0.into());
    }
    let group = doc["uplink_group"][0].as_table_mut().expect("a group");
    group.insert("weights".into(), toml::Value::Array(vec![1.into(); 4]));
    doc
}

/// The probe port, added to the default's six, in each backend's flavour.
const PROBE_PORT: &str =
    "name = \"probe\"\nrole = \"downlink\"\nmac = \"02:5a:01:09:00:01\"\nrate_gbps = 100.0\n";
const PORT_FLAVOURS: &[&str] = &[
    "backend = \"mem\"",
    "backend = \"af_xdp\"\ninterface = \"probe0\"",
    "backend = \"pcap\"\npcap_in = \"probe.pcap\"",
    "backend = \"dpdk\"\ndevice = \"0000:3b:00.0\"",
    "backend = \"mem\"\nrnic = \"selective_repeat\"",
];

/// The configurations a section's keys are probed in; each validates as it is.
fn contexts(section: &str) -> Vec<Context> {
    let at = |doc, path: Vec<(&'static str, Option<usize>)>, field: &str| Context {
        doc,
        path,
        field: field.to_string(),
    };
    match section {
        "switch" => {
            // Without path stamps, for as many workers as a switch may have.
            let mut unstamped = base();
            unstamped["uplink_group"][0]
                .as_table_mut()
                .expect("a group")
                .remove("path_stamps");
            vec![
                at(base(), vec![("switch", None)], "switch"),
                at(unstamped, vec![("switch", None)], "switch"),
            ]
        }
        "reorder" => {
            // Selective-repeat hosts: where `nak_filter` is allowed.
            let mut sr = base();
            let t = table("rnic = \"selective_repeat\"");
            match sr.get_mut("reorder").and_then(|r| r.as_table_mut()) {
                Some(r) => r.extend(t),
                None => {
                    sr.insert("reorder".into(), t.into());
                }
            }
            vec![
                at(base(), vec![("reorder", None)], "reorder"),
                at(sr, vec![("reorder", None)], "reorder"),
            ]
        }
        "port" => PORT_FLAVOURS
            .iter()
            .map(|flavour| {
                let mut doc = base();
                let i = push(&mut doc, "port", &format!("{PROBE_PORT}{flavour}"));
                at(doc, vec![("port", Some(i))], &format!("port[{i}]"))
            })
            .collect(),
        "ecn" => {
            let mut doc = base();
            let t = table("ecn = { kmin_kb = 0.0, kmax_kb = 1e6, pmax = 0.2 }");
            doc["switch"].as_table_mut().expect("[switch]").extend(t);
            vec![at(doc, vec![("switch", None), ("ecn", None)], "switch.ecn")]
        }
        "uplink_group" | "uplink_group.health" => {
            let stamped = base();
            let mut plain = base();
            plain["uplink_group"][0]
                .as_table_mut()
                .expect("a group")
                .remove("path_stamps");
            let mut path = vec![("uplink_group", Some(0))];
            let mut field = "uplink_group[0]".to_string();
            if section == "uplink_group.health" {
                path.push(("health", None));
                field.push_str(".health");
            }
            vec![at(stamped, path.clone(), &field), at(plain, path, &field)]
        }
        "route" => {
            let mut doc = base();
            let i = push(
                &mut doc,
                "route",
                "prefix = \"10.9.0.0/16\"\nport = \"h1\"\nvia = \"10.1.1.254\"",
            );
            vec![
                at(base(), vec![("route", Some(0))], "route[0]"),
                at(doc, vec![("route", Some(i))], &format!("route[{i}]")),
            ]
        }
        "neighbor" => {
            let mut doc = base();
            let entry = "ip = \"10.1.1.20\"\nmac = \"02:00:00:00:00:20\"\nport = \"h1\"";
            let i = push(&mut doc, "neighbor", entry);
            vec![at(
                doc,
                vec![("neighbor", Some(i))],
                &format!("neighbor[{i}]"),
            )]
        }
        "dpdk" => {
            let mut doc = base();
            push(
                &mut doc,
                "port",
                &format!("{PROBE_PORT}{}", PORT_FLAVOURS[3]),
            );
            doc.insert("dpdk".into(), toml::Table::new().into());
            vec![at(doc, vec![("dpdk", None)], "dpdk")]
        }
        other => panic!("no probe context for section {other}: add one"),
    }
}

/// Parse and validation of a document: what it describes, or the first problem.
fn outcome(doc: &toml::Table) -> Result<String, ConfigError> {
    let text = toml::to_string(doc).expect("a TOML document");
    Config::parse(&text, "<probe>")?
        .validate()
        .map(|v| format!("{v:?}"))
}

/// `text` as a TOML value.
fn value(text: &str) -> toml::Value {
    table(&format!("v = {text}"))
        .remove("v")
        .expect("the value")
}

#[test]
fn every_probe_context_validates() {
    for s in SECTIONS {
        for c in contexts(s.name) {
            if let Err(e) = outcome(&c.doc) {
                panic!("{} context {}: {e}", s.name, c.field);
            }
        }
    }
}

#[test]
fn each_default_is_what_omitting_the_key_gives() {
    for s in SECTIONS {
        for k in s.keys {
            let Some(text) = k.default.value() else {
                continue;
            };
            let v = value(&text);
            let mut valid = 0;
            for c in contexts(s.name) {
                let set = outcome(&c.with(k.name, Some(v.clone())));
                if set.is_ok() {
                    let omitted = outcome(&c.with(k.name, None));
                    assert!(
                        set == omitted,
                        "{} {} = {text} (the table's default) is not what omitting it gives in \
                         {}",
                        s.header,
                        k.name,
                        c.field
                    );
                    valid += 1;
                }
            }
            assert!(
                valid > 0,
                "{} {} = {text} never validates",
                s.header,
                k.name
            );
        }
    }
}

#[test]
fn required_keys_are_the_ones_the_file_must_give() {
    for s in SECTIONS {
        for k in s.keys {
            let optional = contexts(s.name)
                .iter()
                .any(|c| outcome(&c.with(k.name, None)).is_ok());
            let required = matches!(k.default, WhenUnset::Required);
            assert_eq!(
                optional, !required,
                "{} {}: the table says required = {required}",
                s.header, k.name
            );
        }
    }
}

/// `v` in the shape of the key's current value: an array of as many when it is an array.
fn shaped(c: &Context, key: &str, v: toml::Value) -> toml::Value {
    match c.current(key) {
        Some(toml::Value::Array(a)) => toml::Value::Array(vec![v; a.len()]),
        _ => v,
    }
}

/// True when `key = v` validates in some context of the section.
fn accepted(s: &Section, key: &str, v: &toml::Value) -> bool {
    contexts(s.name)
        .iter()
        .any(|c| outcome(&c.with(key, Some(shaped(c, key, v.clone())))).is_ok())
}

/// Checks that `key = v` fails in every context of the section, naming the key; returns the
/// errors that name exactly `section.key`.
fn refused(s: &Section, key: &str, v: &toml::Value) -> Vec<ConfigError> {
    let mut exact = Vec::new();
    for c in contexts(s.name) {
        match outcome(&c.with(key, Some(shaped(&c, key, v.clone())))) {
            Ok(_) => panic!("{} {key} = {v} validates in {}", s.header, c.field),
            Err(e) => {
                assert!(
                    e.field.starts_with(&c.field) && e.to_string().contains(key),
                    "{} {key} = {v} is refused for another reason: {e}",
                    s.header
                );
                if e.field == format!("{}.{key}", c.field) {
                    exact.push(e);
                }
            }
        }
    }
    exact
}

/// Lower bounds no context can accept because a rule of another key is stricter: a DPDK
/// port's rings need more than the smallest pool `[dpdk] mbufs` allows.
const LOWER_BOUNDS_OUT_OF_REACH: &[(&str, &str)] = &[("dpdk", "mbufs")];

fn int(v: u64) -> toml::Value {
    toml::Value::Integer(i64::try_from(v).expect("a TOML integer"))
}

#[test]
fn each_range_is_what_validation_accepts_and_no_more() {
    for s in SECTIONS {
        for k in s.keys {
            let name = (s.header, k.name);
            match k.range {
                Range::Int(r) => {
                    let reach_lo = !LOWER_BOUNDS_OUT_OF_REACH.contains(&(s.name, k.name));
                    if reach_lo {
                        assert!(accepted(s, k.name, &int(r.lo)), "{name:?} {}", r.lo);
                    }
                    let mut outside = Vec::new();
                    if r.lo > 0 {
                        outside.push(r.lo - 1);
                    }
                    if let Some(hi) = r.hi {
                        assert!(accepted(s, k.name, &int(hi)), "{name:?} {hi}");
                        outside.push(hi + 1);
                        if r.powers_of_two {
                            outside.push(hi * 2);
                            outside.extend((r.lo + 1..hi).find(|v| !v.is_power_of_two()));
                        }
                    }
                    for v in outside {
                        refused(s, k.name, &int(v));
                    }
                }
                Range::Float(r) => {
                    let nudge = |x: f64| x.abs().max(1.0) * 1e-6;
                    let lo_in = if r.above_lo { r.lo + nudge(r.lo) } else { r.lo };
                    let lo_out = if r.above_lo { r.lo } else { r.lo - nudge(r.lo) };
                    for v in [lo_in, r.hi] {
                        assert!(accepted(s, k.name, &v.into()), "{name:?} {v}");
                    }
                    for v in [lo_out, r.hi + nudge(r.hi)] {
                        refused(s, k.name, &v.into());
                    }
                }
                Range::Choices(names) => {
                    for n in names {
                        assert!(accepted(s, k.name, &(*n).into()), "{name:?} {n}");
                    }
                    let exact = refused(s, k.name, &"no_such_choice".into());
                    assert!(
                        !exact.is_empty(),
                        "{name:?}: no error names the key exactly"
                    );
                    // The names the parser offers (`'a', 'b' or 'c'`), when it quotes them.
                    for e in exact {
                        let offered: BTreeSet<&str> = e
                            .reason
                            .split('\'')
                            .skip(1)
                            .step_by(2)
                            .filter(|n| *n != "no_such_choice")
                            .collect();
                        let listed: BTreeSet<&str> = names.iter().copied().collect();
                        assert!(offered.is_empty() || offered == listed, "{name:?}: {e}");
                    }
                }
                Range::Any | Range::Entries(_) | Range::Rule(_) => {}
            }
        }
    }
}

#[test]
fn the_spray_policies_are_every_policy() {
    let all: BTreeSet<&str> = SprayPolicy::ALL.iter().map(|p| p.name()).collect();
    assert_eq!(all, SPRAY_POLICIES.iter().copied().collect());
}

#[test]
fn rules_in_words_hold_at_their_bounds() {
    let port = section("port").expect("[[port]]");
    let xdp = &contexts("port")[1];
    let fill = |v: u32| outcome(&xdp.with("fill_ring_size", Some(int(v.into()))));
    assert!(fill(FILL_RING_MAX).is_ok());
    assert!(fill(FILL_RING_MAX * 2).is_err());
    assert!(fill(DEFAULT_RING_SIZE / 2).is_err());
    let rule = port
        .key("fill_ring_size")
        .expect("fill_ring_size")
        .range_text();
    assert!(rule.contains(&FILL_RING_MAX.to_string()), "{rule}");

    let reorder = &contexts("reorder")[0];
    let prefix = |v4: u64, v6: u64| {
        let v = toml::Value::Array(vec![int(v4), int(v6)]);
        outcome(&reorder.with("stamp_source_prefix", Some(v)))
    };
    assert!(prefix(32, 128).is_ok() && prefix(0, 0).is_ok());
    assert!(prefix(33, 128).is_err() && prefix(32, 129).is_err());

    let peers = section("uplink_group.health")
        .and_then(|h| h.key("peers"))
        .expect("health.peers");
    assert_eq!(peers.range, Range::Entries(Ints::new(1, MAX_PEERS as u64)));
}

#[test]
fn ranges_read_as_the_validator_words_them() {
    assert_eq!(WORKERS.to_string(), "1 to 64");
    assert_eq!(PATH_STAMP_LANES.to_string(), "1, 2, 4 or 8");
    assert_eq!(WINDOW.to_string(), "a power of two from 64 to 4096");
    assert_eq!(HOLD_TIMEOUT_US.to_string(), "at least 1");
    assert_eq!(RATE_GBPS.to_string(), "above 0, at most 1000");
    assert_eq!(ECN_KB.to_string(), "0 to 1000000");
    assert_eq!(
        Range::Choices(ROLES).to_string(),
        "one of \"downlink\" or \"uplink\""
    );
    assert!(PATH_STAMP_LANES.admits(4) && !PATH_STAMP_LANES.admits(3));
    assert!(!PATH_STAMP_LANES.admits(16) && !PATH_STAMP_LANES.admits(0));
    assert!(!RATE_GBPS.admits(0.0) && RATE_GBPS.admits(1000.0) && !RATE_GBPS.admits(f64::NAN));
}
