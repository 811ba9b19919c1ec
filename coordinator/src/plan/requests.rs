//! What a scenario sends: its weighted mix of templated requests, and the
//! data table their placeholders draw from.

use std::path::{Path, PathBuf};

use loadfleet_proto::bounds::{
    MAX_DATA_BYTES, MAX_DATA_COLUMNS, MAX_DATA_ROWS, MAX_HEADERS, MAX_HEADER_BYTES,
    MAX_METHOD_BYTES, MAX_REQUESTS, MAX_REQUEST_WEIGHT,
};
use loadfleet_proto::partition::MAX_TOTAL_WEIGHT;
use loadfleet_proto::template::Text;
use toml::Spanned;

use super::check::Check;
use super::raw::{RawData, RawRequest};
use super::{Data, RequestPlan};

/// The data table of scenario `i`, read from `base`.
pub(super) fn data(c: &mut Check<'_>, i: usize, d: &Spanned<RawData>, base: &Path) -> Option<Data> {
    let at = |field: &str| format!("scenario[{i}].{field}");
    let sp = d.span();
    let d = d.get_ref();
    let random = match d.pick.as_ref().map(|p| p.get_ref().as_str()) {
        None | Some("round_robin") => false,
        Some("random") => true,
        Some(other) => {
            c.err(
                at("data.pick"),
                Some(sp),
                format!("{other:?} is not a pick rule; use \"round_robin\" or \"random\""),
            );
            false
        }
    };
    match read_csv(&base.join(d.file.get_ref())) {
        Ok((columns, rows)) => Some(Data {
            columns,
            rows,
            random,
        }),
        Err(e) => {
            c.err(at("data.file"), Some(d.file.span()), e);
            None
        }
    }
}

/// The requests of scenario `i` (one `GET` of the target when none is
/// given); placeholders may name the data table's `columns`.
pub(super) fn requests(
    c: &mut Check<'_>,
    i: usize,
    raw: &[Spanned<RawRequest>],
    columns: &[String],
    base: &Path,
) -> Vec<RequestPlan> {
    if raw.is_empty() {
        return vec![RequestPlan {
            grpc: None,
            method: "GET".into(),
            path: String::new(),
            headers: Vec::new(),
            body: Vec::new(),
            weight: 1,
        }];
    }
    let at = format!("scenario[{i}].request");
    if !c.at_most_entries(
        &at,
        raw.get(MAX_REQUESTS).map(Spanned::span),
        raw.len(),
        MAX_REQUESTS,
        "merge request kinds or split the scenario",
    ) {
        return Vec::new();
    }
    let requests: Vec<RequestPlan> = raw
        .iter()
        .enumerate()
        .map(|(k, r)| request(c, &format!("{at}[{k}]"), r, columns, base))
        .collect();
    // Agents deal arrivals to requests by an interleave of the weights.
    let total: u64 = requests.iter().map(|r| u64::from(r.weight)).sum();
    if total > MAX_TOTAL_WEIGHT {
        c.err(
            format!("{at}.weight"),
            raw.first().map(Spanned::span),
            format!("the weights add up to {total}, more than {MAX_TOTAL_WEIGHT}; use smaller weights in the same proportions"),
        );
    }
    requests
}

fn request(
    c: &mut Check<'_>,
    at: &str,
    spanned: &Spanned<RawRequest>,
    columns: &[String],
    base: &Path,
) -> RequestPlan {
    if let Some(method) = &spanned.get_ref().grpc {
        return super::grpc::request(c, at, spanned, method, columns, base);
    }
    super::grpc::not_grpc(c, at, spanned);
    let sp = spanned.span();
    let f = |name: &str| format!("{at}.{name}");
    let r = spanned.get_ref();
    let method = r
        .method
        .clone()
        .unwrap_or_else(|| "GET".into())
        .to_uppercase();
    if method.len() > MAX_METHOD_BYTES {
        c.err(
            f("method"),
            Some(sp.clone()),
            format!("is {} bytes long, more than {MAX_METHOD_BYTES}; use a standard method such as GET or POST", method.len()),
        );
    } else if http::Method::from_bytes(method.as_bytes()).is_err() {
        c.err(
            f("method"),
            Some(sp.clone()),
            format!("{method:?} is not an HTTP method"),
        );
    }
    let path = r.path.clone().unwrap_or_default();
    if let Err(e) = Text::parse(&path, columns) {
        c.err(f("path"), Some(sp.clone()), e.to_string());
    }
    c.at_most_entries(
        &f("headers"),
        Some(sp.clone()),
        r.headers.len(),
        MAX_HEADERS,
        "send fewer headers",
    );
    for (name, value) in &r.headers {
        if name.len() + value.len() > MAX_HEADER_BYTES {
            c.err(
                f(&format!("headers.{name}")),
                Some(sp.clone()),
                format!(
                    "name and value are {} bytes, more than {MAX_HEADER_BYTES}; shorten the value",
                    name.len() + value.len()
                ),
            );
        }
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            c.err(
                f("headers"),
                Some(sp.clone()),
                format!("{name:?} is not a valid header name"),
            );
        }
        if let Err(e) = Text::parse(value, columns) {
            c.err(
                f(&format!("headers.{name}")),
                Some(sp.clone()),
                e.to_string(),
            );
        }
    }
    let body = match (&r.body, &r.body_file) {
        (Some(_), Some(bf)) => {
            c.err(
                f("body_file"),
                Some(bf.span()),
                "give body or body_file, not both",
            );
            Vec::new()
        }
        (Some(b), None) => {
            if let Err(e) = Text::parse(b, columns) {
                c.err(f("body"), Some(sp.clone()), e.to_string());
            }
            b.clone().into_bytes()
        }
        (None, Some(bf)) => body_file(c, &f("body_file"), bf, columns, base),
        (None, None) => Vec::new(),
    };
    let weight = c
        .positive(&f("weight"), &r.weight, i64::from(MAX_REQUEST_WEIGHT))
        .unwrap_or(1);
    RequestPlan {
        grpc: None,
        method,
        path,
        headers: r
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        body,
        weight,
    }
}

pub(super) fn body_file(
    c: &mut Check<'_>,
    field: &str,
    bf: &Spanned<String>,
    columns: &[String],
    base: &Path,
) -> Vec<u8> {
    let path: PathBuf = base.join(bf.get_ref());
    let too_big = std::fs::metadata(&path).is_ok_and(|m| m.len() > MAX_DATA_BYTES);
    match std::fs::read(&path) {
        Ok(_) if too_big => {
            c.err(
                field,
                Some(bf.span()),
                format!(
                    "{} is larger than {MAX_DATA_BYTES} bytes; use a smaller body",
                    path.display()
                ),
            );
            Vec::new()
        }
        Ok(bytes) => {
            if let Ok(text) = std::str::from_utf8(&bytes) {
                if let Err(e) = Text::parse(text, columns) {
                    c.err(field, Some(bf.span()), e.to_string());
                }
            }
            bytes
        }
        Err(e) => {
            c.err(
                field,
                Some(bf.span()),
                format!("cannot read {}: {e}", path.display()),
            );
            Vec::new()
        }
    }
}

/// Reads a CSV data file: a header row, then values.
fn read_csv(path: &Path) -> Result<(Vec<String>, Vec<Vec<String>>), String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if meta.len() > MAX_DATA_BYTES {
        return Err(format!(
            "{} is {} bytes, more than the {MAX_DATA_BYTES} that can be shipped to agents; use a smaller sample",
            path.display(),
            meta.len()
        ));
    }
    let mut reader =
        csv::Reader::from_path(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let columns: Vec<String> = reader
        .headers()
        .map_err(|e| format!("{}: bad header row: {e}", path.display()))?
        .iter()
        .map(str::to_string)
        .collect();
    if columns.len() > MAX_DATA_COLUMNS {
        return Err(format!(
            "{} has {} columns, more than the {MAX_DATA_COLUMNS} allowed; keep only the columns the requests use",
            path.display(),
            columns.len()
        ));
    }
    // Count first, without building rows, so an oversized file is refused
    // at parsing speed rather than after a million allocations.
    let mut counter =
        csv::Reader::from_path(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut record = csv::ByteRecord::new();
    let mut count = 0usize;
    while counter
        .read_byte_record(&mut record)
        .map_err(|e| format!("{}: row {}: {e}", path.display(), count + 2))?
    {
        count += 1;
        if count > MAX_DATA_ROWS {
            return Err(format!(
                "{} has more than {MAX_DATA_ROWS} rows; use a smaller sample",
                path.display()
            ));
        }
    }
    let mut rows = Vec::with_capacity(count);
    for (n, record) in reader.records().enumerate() {
        let record = record.map_err(|e| format!("{}: row {}: {e}", path.display(), n + 2))?;
        rows.push(record.iter().map(str::to_string).collect());
    }
    if rows.is_empty() {
        return Err(format!("{} has a header but no rows", path.display()));
    }
    Ok((columns, rows))
}
