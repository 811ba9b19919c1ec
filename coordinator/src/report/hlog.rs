//! `latency.hlog`: the HdrHistogram interval log, for the standard
//! HdrHistogram tools: per second an untagged entry of all outcomes, then
//! one tagged `<scenario>.<outcome class>` per outcome class.
//! Written as the run goes (by `run::folder::live`): the header once, then each
//! second's entries as that second settles.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use loadfleet_proto::vocab::OutcomeClass;

/// Values are microseconds; the log's max column shows milliseconds.
const MAX_VALUE_DIVISOR: f64 = 1000.0;

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

/// The log's header: what it holds, the run's start (entries are seconds
/// from it) and the divisor of the max column.
pub(crate) fn write_header(out: &mut impl Write, started_at: SystemTime) -> std::io::Result<()> {
    let mut serializer = V2DeflateSerializer::new();
    IntervalLogWriterBuilder::new()
        .add_comment("loadfleet latency from intended send time, microseconds")
        .with_start_time(started_at)
        .with_base_time(started_at)
        .with_max_value_divisor(MAX_VALUE_DIVISOR)
        .begin_log_with(out, &mut serializer)
        .map(|_| ())
}

/// One second's entries, one per (scenario index, outcome class), without a
/// header. They are formatted in memory and written with one call, so a
/// process killed meanwhile leaves whole lines or none.
pub(crate) fn write_entries(
    out: &mut impl Write,
    second: u64,
    latency_by_class: &BTreeMap<(u32, OutcomeClass), Histogram<u64>>,
    scenarios: &[String],
) -> std::io::Result<()> {
    let mut serializer = V2DeflateSerializer::new();
    let mut builder = IntervalLogWriterBuilder::new();
    builder.with_max_value_divisor(MAX_VALUE_DIVISOR);
    // The crate writes its divisor line on every writer it makes; that line
    // belongs to the header alone, so what the builder writes by itself is
    // measured here and cut from the batch below.
    let mut preamble = Vec::new();
    builder
        .begin_log_with(&mut preamble, &mut serializer)
        .map(|_| ())?;
    let mut batch = Vec::new();
    {
        let mut writer = builder.begin_log_with(&mut batch, &mut serializer)?;
        // First an untagged entry of every outcome and scenario together:
        // the reference tools (HistogramLogProcessor, plotters) read only
        // untagged entries unless given a tag.
        let mut all = loadfleet_proto::histogram::new_histogram();
        for h in latency_by_class.values() {
            all.add(h)
                .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        }
        if !all.is_empty() {
            writer
                .write_histogram(
                    &all,
                    Duration::from_secs(second),
                    Duration::from_secs(1),
                    None,
                )
                .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        }
        for ((scenario, class), h) in latency_by_class {
            if h.is_empty() {
                continue;
            }
            let name = scenarios
                .get(*scenario as usize)
                .map_or_else(|| format!("scenario-{scenario}"), |n| hlog_safe(n));
            let tag_text = format!("{name}.{class}");
            writer
                .write_histogram(
                    h,
                    Duration::from_secs(second),
                    Duration::from_secs(1),
                    Tag::new(&tag_text),
                )
                .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        }
    }
    out.write_all(batch.get(preamble.len()..).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadfleet_proto::vocab::OutcomeClass;

    #[test]
    fn entries_carry_no_header_and_the_header_is_written_once() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        h.record(1500).unwrap();
        let by_class: BTreeMap<_, _> = [((0u32, OutcomeClass::Success), h)].into_iter().collect();
        let mut log = Vec::new();
        write_header(
            &mut log,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_000),
        )
        .unwrap();
        write_entries(&mut log, 0, &by_class, &["a b".into()]).unwrap();
        write_entries(&mut log, 1, &by_class, &["a b".into()]).unwrap();
        let text = String::from_utf8(log).unwrap();
        assert_eq!(text.matches("MaxValueDivisor").count(), 1, "{text}");
        let entries: Vec<&str> = text.lines().filter(|l| l.starts_with("Tag=")).collect();
        assert_eq!(entries.len(), 2, "{text}");
        let untagged: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
            .collect();
        assert_eq!(untagged.len(), 2, "{text}");
        assert!(untagged[0].starts_with("0.000,1.000,1.500,"), "{text}");
        assert!(
            entries[0].starts_with("Tag=a_b.2xx,0.000,1.000,1.500,"),
            "{text}"
        );
        assert!(entries[1].starts_with("Tag=a_b.2xx,1.000,1.000,"), "{text}");
    }
}
