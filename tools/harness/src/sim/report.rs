//! What the field reads from a simulation: FCT slowdown (a flow's completion time over its
//! ideal, the flow alone on the fabric) in 20 bins of 5% of the flows by size, average and p99
//! per bin and overall; the table, and every flow as CSV.

use std::fmt::Write as _;

use super::SimOutcome;

/// One flow's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowResult {
    /// Flow id.
    pub id: u32,
    /// Sender.
    pub src: u32,
    /// Receiver.
    pub dst: u32,
    /// Bytes.
    pub bytes: u64,
    /// When it arrived (the application posted it).
    pub start_ns: u64,
    /// Its completion time (`None`: not finished): on a QP of its own, first packet to last
    /// ACK; on a long-lived QP, from its arrival (or the QP's connection, if later) to its last
    /// ACK.
    pub fct_ns: Option<u64>,
    /// The ideal: alone on the fabric.
    pub ideal_ns: u64,
}

impl FlowResult {
    /// FCT over the ideal (at least 1.0 is expected; finished flows only).
    pub fn slowdown(&self) -> Option<f64> {
        self.fct_ns
            .map(|f| (f as f64 / self.ideal_ns.max(1) as f64).max(1.0))
    }
}

/// Average and p99 slowdown of a set of flows.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Slowdown {
    /// Flows finished.
    pub flows: usize,
    /// Mean.
    pub avg: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest flow of the bin, bytes.
    pub max_bytes: u64,
}

fn summarise(flows: &[&FlowResult]) -> Slowdown {
    let mut s: Vec<f64> = flows.iter().filter_map(|f| f.slowdown()).collect();
    if s.is_empty() {
        return Slowdown::default();
    }
    s.sort_by(f64::total_cmp);
    let p99 = s[((s.len() as f64 * 0.99).ceil() as usize).clamp(1, s.len()) - 1];
    Slowdown {
        flows: s.len(),
        avg: s.iter().sum::<f64>() / s.len() as f64,
        p99,
        max_bytes: flows.iter().map(|f| f.bytes).max().unwrap_or(0),
    }
}

/// Overall, and per bin of 5% of the flows by size (smallest first), over the flows that
/// finished (the table counts the others apart; `--check` fails on any).
pub fn slowdowns(o: &SimOutcome) -> (Slowdown, Vec<Slowdown>) {
    let mut by_size: Vec<&FlowResult> = o.flows.iter().collect();
    by_size.sort_by_key(|f| (f.bytes, f.id));
    let overall = summarise(&by_size);
    let n = by_size.len();
    let bins = (0..20)
        .map(|b| summarise(&by_size[n * b / 20..n * (b + 1) / 20]))
        .collect();
    (overall, bins)
}

/// The table of several runs over the same flows.
pub fn table(runs: &[SimOutcome]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<16} {:<5} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>13} {:>9} {:>7} {:>10} {:>8} {:>6} {:>11}",
        "scheme",
        "rnic",
        "flows",
        "unfin",
        "avg",
        "p99",
        "avg <bin1",
        "p99 >bin20",
        "drops",
        "NAKs s/r",
        "retrans",
        "imbal",
        "reord KB",
        "streams",
        "outs",
        "out us max"
    );
    for r in runs {
        let (all, bins) = slowdowns(r);
        let unfinished = r.flows.iter().filter(|f| f.fct_ns.is_none()).count();
        let imbal = r.uplink_imbalance.iter().sum::<f64>() / r.uplink_imbalance.len().max(1) as f64;
        let _ = writeln!(
            s,
            "{:<16} {:<5} {:>7} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>10.2} {:>8} {:>13} {:>9} {:>7.2} {:>10.1} {:>8} {:>6} {:>11}",
            r.scheme.name(),
            crate::rack::demo::receiver_name(r.receiver),
            r.flows.len(),
            unfinished,
            all.avg,
            all.p99,
            bins.first().map_or(0.0, |b| b.avg),
            bins.last().map_or(0.0, |b| b.p99),
            r.drops,
            format!("{}/{}", r.naks, r.naks_received),
            r.retransmitted,
            imbal,
            r.reorder_peak_bytes.iter().copied().max().unwrap_or(0) as f64 / 1000.0,
            r.reorder_peak_streams.iter().copied().max().unwrap_or(0),
            if r.false_outs > 0 {
                format!("{}!{}", r.path_outs, r.false_outs)
            } else {
                r.path_outs.to_string()
            },
            fault_out(r)
        );
    }
    s
}

/// How long after the first spine fault the last leaf took that spine out of its spray set, in
/// microseconds (`-`: no fault; `never`: some leaf did not).
pub fn fault_out(r: &SimOutcome) -> String {
    if r.fault_out_ns.is_empty() {
        return "-".into();
    }
    match r.fault_out_ns.iter().copied().collect::<Option<Vec<u64>>>() {
        Some(v) => format!("{:.0}", v.into_iter().max().unwrap_or(0) as f64 / 1e3),
        None => "never".into(),
    }
}

/// Every flow of a run as CSV (`id,src,dst,bytes,start_ns,fct_ns,ideal_ns,slowdown`; an
/// unfinished flow has empty FCT and slowdown).
pub fn csv(o: &SimOutcome) -> String {
    let mut s = String::from("scheme,rnic,id,src,dst,bytes,start_ns,fct_ns,ideal_ns,slowdown\n");
    for f in &o.flows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{}",
            o.scheme.name(),
            crate::rack::demo::receiver_name(o.receiver),
            f.id,
            f.src,
            f.dst,
            f.bytes,
            f.start_ns,
            f.fct_ns.map(|x| x.to_string()).unwrap_or_default(),
            f.ideal_ns,
            f.slowdown().map(|x| format!("{x:.4}")).unwrap_or_default()
        );
    }
    s
}

/// Slowdown per size bin, one line per bin and run: `bin,max_bytes,scheme,rnic,flows,avg,p99`.
pub fn bins_csv(runs: &[SimOutcome]) -> String {
    let mut s = String::from("bin,max_bytes,scheme,rnic,flows,avg,p99\n");
    for r in runs {
        let (_, bins) = slowdowns(r);
        for (i, b) in bins.iter().enumerate() {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{:.4},{:.4}",
                i + 1,
                b.max_bytes,
                r.scheme.name(),
                crate::rack::demo::receiver_name(r.receiver),
                b.flows,
                b.avg,
                b.p99
            );
        }
    }
    s
}

/// Every run as JSON: its summary (overall and per bin), counters and per-leaf figures, and
/// every flow as `[id, src, dst, bytes, start_ns, fct_ns or null, ideal_ns]`. Nothing of the
/// wall clock: the same flows give the same text.
pub fn json(runs: &[SimOutcome]) -> String {
    use serde_json::{json, Value};
    let sum = |s: &Slowdown| json!({"flows": s.flows, "avg": s.avg, "p99": s.p99, "max_bytes": s.max_bytes});
    let runs: Vec<Value> = runs
        .iter()
        .map(|r| {
            let (all, bins) = slowdowns(r);
            let flows: Vec<Value> = r
                .flows
                .iter()
                .map(|f| json!([f.id, f.src, f.dst, f.bytes, f.start_ns, f.fct_ns, f.ideal_ns]))
                .collect();
            json!({
                "scheme": r.scheme.name(),
                "rnic": crate::rack::demo::receiver_name(r.receiver),
                "overall": sum(&all),
                "bins": bins.iter().map(sum).collect::<Vec<_>>(),
                "unfinished": r.flows.iter().filter(|f| f.fct_ns.is_none()).count(),
                "drops": r.drops,
                "naks": r.naks,
                "naks_received": r.naks_received,
                "retransmitted": r.retransmitted,
                "path_order_losses": r.path_losses,
                "hold_timeouts": r.reorder_timeouts,
                "detection_p99_ns": r.detect_p99_ns,
                "switch_tx_packets": r.switch_tx_pkts,
                "simulated_ns": r.simulated_ns,
                "leaves": {
                    "uplink_imbalance": r.uplink_imbalance,
                    "reorder_max_depth_packets": r.reorder_max_depth,
                    "reorder_peak_held_bytes": r.reorder_peak_bytes,
                    "reorder_peak_streams": r.reorder_peak_streams,
                    "reorder_streams_at_end": r.reorder_streams,
                },
                "flow_fields": ["id", "src", "dst", "bytes", "start_ns", "fct_ns", "ideal_ns"],
                "flows": flows,
            })
        })
        .collect();
    let mut s = serde_json::to_string(&json!({ "runs": runs })).unwrap_or_default();
    s.push('\n');
    s
}

/// A scheme's colour in the plot.
pub fn scheme_colour(s: super::topo::Scheme) -> &'static str {
    use super::topo::Scheme;
    match s {
        Scheme::Ecmp => "#d62728",
        Scheme::Flowlet => "#9467bd",
        Scheme::Spray => "#ff7f0e",
        Scheme::SprayReorder => "#2ca02c",
        Scheme::SprayNakFilter => "#1f77b4",
    }
}

/// A flow size for an axis label: 1.2K, 350K, 2.0M (bytes, powers of 1000).
fn size_label(b: u64) -> String {
    // Bounds where the rounded figure would reach the next unit's first label.
    match b {
        0..=999 => format!("{b}"),
        1_000..=9_949 => format!("{:.1}K", b as f64 / 1e3),
        9_950..=999_499 => format!("{:.0}K", b as f64 / 1e3),
        _ => format!("{:.1}M", b as f64 / 1e6),
    }
}

/// An SVG of FCT slowdown against flow size, as papers draw it: two panels (average, p99),
/// the 20 bins of 5% of the flows along x (each labelled with its largest flow), slowdown on
/// a log scale along y, one line per run (colour: scheme; dashed: selective repeat), and a
/// legend.
pub fn svg(runs: &[SimOutcome], title: &str) -> String {
    let all: Vec<(Slowdown, Vec<Slowdown>)> = runs.iter().map(slowdowns).collect();
    let (pw, ph, left, top, gap) = (460.0, 300.0, 60.0, 50.0, 90.0);
    let legend_y = top + ph + 70.0;
    let w = left + 2.0 * pw + gap + 20.0;
    let h = legend_y + 20.0 + runs.len() as f64 * 16.0 + 10.0;
    let mut s = crate::svg::begin(w, h);
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"20\" font-size=\"14\">{}</text>",
        xml_escape(title)
    );
    for (panel, name) in [(0usize, "average"), (1, "p99")] {
        let x0 = left + panel as f64 * (pw + gap);
        let value = |b: &Slowdown| if panel == 0 { b.avg } else { b.p99 };
        let top_value = all
            .iter()
            .flat_map(|(_, bins)| bins.iter().map(value))
            .fold(2.0, f64::max);
        let hi = top_value.log10().ceil().max(0.5);
        let y_of = |v: f64| top + ph - ph * (v.max(1.0).log10() / hi);
        let _ = writeln!(
            s,
            "<text x=\"{x0}\" y=\"{}\" font-size=\"13\">FCT slowdown, {name}</text><rect x=\"{x0}\" y=\"{top}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"black\"/>",
            top - 8.0
        );
        // y ticks at 1, 2, 5 of every decade.
        let mut decade = 1.0f64;
        while decade.log10() <= hi + 1e-9 {
            for m in [1.0f64, 2.0, 5.0] {
                let v = decade * m;
                if v.log10() > hi + 1e-9 {
                    break;
                }
                let y = y_of(v);
                let _ = writeln!(s, "<line x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v}</text>", x0 + pw, x0 - 4.0, y + 4.0);
            }
            decade *= 10.0;
        }
        let x_of = |i: usize| x0 + pw * (i as f64 + 0.5) / 20.0;
        if let Some((_, bins)) = all.first() {
            for (i, b) in bins.iter().enumerate() {
                let x = x_of(i);
                let _ = writeln!(s, "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"black\"/>", top + ph, top + ph + 4.0);
                if i % 2 == 1 {
                    let _ = writeln!(
                        s,
                        "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                        top + ph + 16.0,
                        size_label(b.max_bytes)
                    );
                }
            }
        }
        crate::svg::axis_titles(
            &mut s,
            (x0, top, pw, ph),
            "flow size (bins of 5% of the flows, labelled with their largest, bytes)",
            34.0,
            "slowdown (log scale)",
            40.0,
        );
        for (r, (_, bins)) in runs.iter().zip(&all) {
            let pts: Vec<String> = bins
                .iter()
                .enumerate()
                .filter(|(_, b)| b.flows > 0)
                .map(|(i, b)| format!("{:.1},{:.1}", x_of(i), y_of(value(b))))
                .collect();
            let _ = writeln!(
                s,
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\"{} points=\"{}\"/>",
                scheme_colour(r.scheme),
                dash(r),
                pts.join(" ")
            );
        }
    }
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"{legend_y}\" font-size=\"12\">Legend (colour: scheme; dashed: selective-repeat RNICs; each label with its overall average and p99)</text>"
    );
    for (i, (r, (o, _))) in runs.iter().zip(&all).enumerate() {
        let y = legend_y + 18.0 + i as f64 * 16.0;
        let label = format!(
            "{} {}: average {:.2}, p99 {:.2}",
            r.scheme.name(),
            crate::rack::demo::receiver_name(r.receiver),
            o.avg,
            o.p99
        );
        crate::svg::legend_entry(&mut s, (left, y), scheme_colour(r.scheme), dash(r), &label);
    }
    s.push_str("</svg>\n");
    s
}

fn dash(r: &SimOutcome) -> &'static str {
    if r.receiver == sprayswitch_models::rnic::ReceiverMode::Sr {
        " stroke-dasharray=\"6,3\""
    } else {
        ""
    }
}

fn xml_escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
