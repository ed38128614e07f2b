//! The perftest lists `scripts/rxe-rack.sh` runs, and the name each test has in the tables.

/// Under `-q 8` and `-b` the client's rxe can leave one QP nearly idle for hundreds of
/// milliseconds while the others send (captured at the ToR's host port: one QP sent 23 packets,
/// then one every 30-80 ms while four others sent 1,500 each), and its retransmission timer
/// fired before its own ACK-requesting packet had left the guest: retries and duplicates with no
/// sequence NAK and nothing dropped or held anywhere in the rack, in ecmp mode as well. That is
/// the guests' TCG scheduling, not the fabric: these variants run with `-u 20` (4.3 s; `-u 17`,
/// 537 ms, was not enough), so that what they count is reordering. So do the latency tests:
/// with their one message in flight, both guests retried at perftest's default timeout
/// (67 ms) in the wire mode too, with no sequence NAK and nothing lost on the path: rxe arms
/// the timer when a request leaves and none is pending and never deletes it, so it fires 67
/// ms after it was armed whatever came back meanwhile, and the completer retries what is in
/// flight then (`ib_read_lat -s 64 -n 500`: 2 retries in wire mode and 2 in reorder mode of
/// one run; with `-u 20`, none in either).
pub const MANY: &str = "-u 20";

/// A test profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// perftest command lines, in order.
    pub tests: Vec<String>,
    /// RoCE path MTUs to run them at.
    pub pmtus: Vec<u32>,
}

/// The bandwidth test `test` alone (`n_one` messages), over 8 QPs (`n_per_qp` each), both ways
/// (`-b`), and both.
fn bw_variants(test: &str, n_one: u32, n_per_qp: u32) -> Vec<String> {
    vec![
        format!("{test} -n {n_one}"),
        format!("{test} -n {n_per_qp} -q 8 {MANY}"),
        format!("{test} -n {n_one} -b {MANY}"),
        format!("{test} -n {n_per_qp} -q 8 -b {MANY}"),
    ]
}

/// `quick`: CI's run (a WRITE, READs with 64 outstanding, a WRITE over 8 QPs; RoCE MTU 1024).
/// `full`: WRITE, READ (-o 64), SEND and atomics (-o 64), each alone, over 8 QPs, with -b and
/// both; WRITE and READ latency; RoCE MTU 1024 and 4096. About 20 MB per bandwidth test (-n is
/// per QP with -q). `-o 64` puts more READs or atomics in flight per QP than a ConnectX allows
/// (16) and pins the number rather than leaving it to the device (perftest's default is the
/// device's maximum, 128 on rxe). perftest takes neither `-q` nor `-b` on latency tests.
pub fn profile(name: &str) -> Option<Profile> {
    match name {
        "quick" => Some(Profile {
            tests: vec![
                "ib_write_bw -s 65536 -n 300".into(),
                "ib_read_bw -s 65536 -n 300 -o 64".into(),
                format!("ib_write_bw -s 65536 -n 40 -q 8 {MANY}"),
            ],
            pmtus: vec![1024],
        }),
        "full" => {
            let mut tests = bw_variants("ib_write_bw -s 65536", 300, 40);
            tests.extend(bw_variants("ib_read_bw -s 65536 -o 64", 300, 40));
            tests.extend(bw_variants("ib_send_bw -s 65536", 300, 40));
            tests.extend(bw_variants("ib_atomic_bw -o 64", 2000, 250));
            tests.push(format!("ib_write_lat -s 64 -n 1000 {MANY}"));
            tests.push(format!("ib_read_lat -s 64 -n 1000 {MANY}"));
            Some(Profile {
                tests,
                pmtus: vec![1024, 4096],
            })
        }
        _ => None,
    }
}

/// Splits a `;`-separated test list (empty entries dropped).
pub fn split_tests(list: &str) -> Vec<String> {
    list.split(';')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(String::from)
        .collect()
}

/// A test's name in the tables: the perftest program without `ib_`, and the options that tell
/// the variants of one program apart (`-q N`, `-o N`, `-b`), e.g. `read_bw-o64-q8-b`.
pub fn label(test: &str) -> String {
    let mut words = test.split_whitespace();
    let mut l = words
        .next()
        .map(|p| p.strip_prefix("ib_").unwrap_or(p).to_string())
        .unwrap_or_default();
    while let Some(w) = words.next() {
        match w {
            "-q" | "-o" => {
                l.push_str(w);
                l.push_str(words.next().unwrap_or(""));
            }
            "-b" => l.push_str("-b"),
            _ => {}
        }
    }
    l
}

/// The labels of a list, in order; a label taken already gets `#N` (its place in the list), so
/// that each row and each ratio belongs to one test.
pub fn labels(tests: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(tests.len());
    for t in tests {
        let mut l = label(t);
        if out.contains(&l) {
            l = format!("{l}#{}", out.len() + 1);
        }
        out.push(l);
    }
    out
}

/// The perftest program of a test (`ib_read_bw`).
pub fn program(test: &str) -> &str {
    test.split_whitespace().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_the_variants_and_repeats_get_their_place() {
        assert_eq!(
            label("ib_read_bw -s 65536 -n 40 -o 64 -q 8 -b -u 20"),
            "read_bw-o64-q8-b"
        );
        assert_eq!(label("ib_write_lat -s 64 -n 1000"), "write_lat");
        let t = split_tests("ib_write_bw -n 1; ib_write_bw -n 2;;ib_send_bw -b");
        assert_eq!(labels(&t), ["write_bw", "write_bw#2", "send_bw-b"]);
        assert_eq!(program(&t[2]), "ib_send_bw");
    }

    #[test]
    fn profiles() {
        let q = profile("quick").unwrap();
        assert_eq!(q.pmtus, [1024]);
        assert_eq!(labels(&q.tests), ["write_bw", "read_bw-o64", "write_bw-q8"]);
        let f = profile("full").unwrap();
        assert_eq!(f.tests.len(), 18);
        assert_eq!(f.pmtus, [1024, 4096]);
        let l = labels(&f.tests);
        assert!(l.contains(&"atomic_bw-o64-q8-b".to_string()), "{l:?}");
        assert!(f
            .tests
            .iter()
            .filter(|t| t.contains("-q 8") || t.contains("-b") || t.contains("_lat"))
            .all(|t| t.contains(MANY)));
        assert!(profile("huge").is_none());
    }
}
