//! `latency.hlog`: the HdrHistogram interval log, tagged
//! `<scenario>.<outcome class>`, for the standard HdrHistogram tools.

use std::io::Write;

use crate::fleet::RunResult;

/// Tags may not hold spaces, commas or other separators of the log format.
fn hlog_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The HdrHistogram interval log: one tagged entry per interval and outcome
/// class, readable by the standard HdrHistogram tools.
pub fn write_hlog(
    out: &mut impl Write,
    result: &RunResult,
    scenarios: &[String],
) -> std::io::Result<()> {
    use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
    use hdrhistogram::serialization::V2DeflateSerializer;
    let start = result
        .started_at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut serializer = V2DeflateSerializer::new();
    let mut builder = IntervalLogWriterBuilder::new();
    builder
        .add_comment("loadfleet latency from intended send time, microseconds")
        .with_start_time(std::time::UNIX_EPOCH + start)
        .with_base_time(std::time::UNIX_EPOCH + start)
        .with_max_value_divisor(1000.0);
    let mut writer = builder
        .begin_log_with(&mut *out, &mut serializer)
        .map_err(std::io::Error::other)?;
    for (&i, iv) in &result.aggregate.intervals {
        for ((scenario, class), h) in &iv.latency_by_class {
            if h.is_empty() {
                continue;
            }
            let name = scenarios
                .get(*scenario as usize)
                .map_or_else(|| format!("scenario-{scenario}"), |n| hlog_safe(n));
            let tag_text = format!("{name}.{class}");
            let tag = Tag::new(&tag_text);
            writer
                .write_histogram(
                    h,
                    std::time::Duration::from_secs(i),
                    std::time::Duration::from_secs(1),
                    tag,
                )
                .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        }
    }
    Ok(())
}
