//! End-to-end: the HTML report of a real local run, opened in headless
//! Chromium. The page must render (a screenshot that is not blank, with
//! the charts' coloured strokes in it), be self-contained (no http(s)
//! reference but the target's own URL) and embed the report JSON.

use crate::browser;
use crate::common;

use std::time::Duration;

use browser::*;
use common::*;

/// Chart series colours, as html.rs draws them (chart strokes only).
const SERIES: [(&str, [u8; 3]); 6] = [
    ("sent / p50 blue", [0x25, 0x63, 0xc9]),
    ("completed green", [0x1f, 0x9a, 0x4a]),
    ("p99 / unsent red", [0xd0, 0x34, 0x2c]),
    ("curve / in-flight purple", [0x7b, 0x3f, 0xc4]),
    ("max in flight orange", [0xe0, 0x7b, 0x00]),
    ("arrivals − completions gap magenta", [0xa0, 0x30, 0x7a]),
];

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 4000;

#[test]
fn html_report_renders_in_a_browser_and_is_self_contained() {
    require_chromium();
    let out = temp_dir("html");
    let mut cmd = coordinator();
    cmd.args(["run", "--local-agents", "2", "--rate", "300"])
        .args(["--duration", "4s", "--testbed-delay", "5ms", "--out"])
        .arg(&out);
    let (status, output) = run(cmd, "coordinator", Duration::from_secs(90));
    let html_path = out.join("report.html");
    assert!(html_path.is_file(), "no report.html ({status}):\n{output}");
    let r = read_report(&out);
    let html = std::fs::read_to_string(&html_path).expect("read report.html");

    // Self-contained: the only URL is the target's, shown as text.
    let target = r["run"]["target"].as_str().expect("target");
    assert!(target.starts_with("http://"), "{target}");
    let rest = html.replace(target, "");
    for scheme in ["http://", "https://"] {
        if let Some(i) = rest.find(scheme) {
            panic!(
                "report.html refers to something outside itself: …{}…",
                &rest[i.saturating_sub(80)..(i + 80).min(rest.len())]
            );
        }
    }
    for tag in ["<link", "<img", "<iframe", "src=", "@import", "url("] {
        assert!(!html.contains(tag), "report.html contains {tag}");
    }

    // The embedded JSON is the report.
    let open = "<script type=\"application/json\" id=\"report\">";
    let start = html.find(open).expect("embedded report JSON") + open.len();
    let end = start + html[start..].find("</script>").expect("end of JSON");
    let embedded: serde_json::Value =
        serde_json::from_str(&html[start..end]).expect("embedded JSON parses");
    assert_eq!(embedded, r, "embedded JSON differs from report.json");

    // The headline leads with intended / sent / unsent, then the charts.
    for needle in [
        "<th>intended</th><th>sent</th><th>unsent</th>",
        "p99.9",
        "<svg class=\"chart\"",
        "Latency by percentile",
        "Arrivals vs completions per second, and the gap",
        "<h2>Agents</h2>",
    ] {
        assert!(html.contains(needle), "report.html lacks {needle:?}");
    }
    assert_eq!(
        html.matches("<svg class=\"chart\"").count(),
        6,
        "six charts"
    );
    assert!(!html.contains("NaN"));

    // Render it.
    let png_path = out.join("report.png");
    screenshot(
        &html_path,
        &png_path,
        &out.join("chromium-profile"),
        WIDTH,
        HEIGHT,
    );
    let img = decode(&png_path);
    assert_eq!(img.width, WIDTH as usize, "screenshot width");
    let total = img.pixels.len();
    let non_white = img
        .pixels
        .iter()
        .filter(|p| p.iter().any(|&c| c < 245))
        .count();
    let mut colours: Vec<[u8; 3]> = img.pixels.clone();
    colours.sort_unstable();
    colours.dedup();
    let summary = format!(
        "{} ({total} px): {non_white} non-white, {} distinct colours",
        png_path.display(),
        colours.len()
    );
    eprintln!("{summary}");
    assert!(non_white * 100 > total * 3, "page looks blank: {summary}");
    assert!(colours.len() >= 64, "too few colours: {summary}");

    // The charts: each series colour is drawn, as strokes (many pixels,
    // spread over a wide span of x), not as a stray dot.
    for (name, colour) in SERIES {
        let hits = img.xs_of(colour, 12);
        let span = hits.iter().max().unwrap_or(&0) - hits.iter().min().unwrap_or(&0);
        eprintln!("{name}: {} px over {span} px of width", hits.len());
        assert!(
            hits.len() >= 150 && span >= 200,
            "chart strokes in {name} missing: {} px over {span} px of width; {summary}",
            hits.len()
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}
