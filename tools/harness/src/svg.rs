//! The pieces every SVG plot of the tools shares (the demo's, the simulator's): the document's
//! opening with a white background, and a panel's axis titles.

use std::fmt::Write as _;

/// An SVG document `w` x `h` with a white background, open for the plot's elements (close it
/// with `</svg>`).
pub fn begin(w: f64, h: f64) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    )
}

/// The titles of a panel at (`x0`, `y0`), `pw` x `ph`: `x_title` centred `x_below` under it,
/// `y_title` turned upright `y_left` left of it.
pub fn axis_titles(
    s: &mut String,
    (x0, y0, pw, ph): (f64, f64, f64, f64),
    x_title: &str,
    x_below: f64,
    y_title: &str,
    y_left: f64,
) {
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{x_title}</text>",
        x0 + pw / 2.0,
        y0 + ph + x_below
    );
    let _ = writeln!(
        s,
        "<text transform=\"translate({:.1},{:.1}) rotate(-90)\" text-anchor=\"middle\">{y_title}</text>",
        x0 - y_left,
        y0 + ph / 2.0
    );
}

/// A legend entry at (`x`, `y`, the label's baseline): a short line in `stroke` with the
/// extra stroke attributes `style` (a dash pattern, or nothing), then `label`.
pub fn legend_entry(s: &mut String, (x, y): (f64, f64), stroke: &str, style: &str, label: &str) {
    let _ = writeln!(
        s,
        "<line x1=\"{x}\" y1=\"{:.1}\" x2=\"{}\" y2=\"{:.1}\" stroke=\"{stroke}\" stroke-width=\"2\"{style}/><text x=\"{}\" y=\"{y:.1}\">{label}</text>",
        y - 4.0,
        x + 30.0,
        y - 4.0,
        x + 36.0
    );
}
