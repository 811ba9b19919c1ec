//! The files a plan names besides itself: request bodies, gRPC messages,
//! data tables and descriptor sets, each read relative to the plan's folder
//! and refused past its bound, since all of it is shipped to every agent.
//!
//! A leaf: it knows the bounds and the template syntax, not the requests
//! that use what it reads.

use std::path::{Path, PathBuf};

use loadfleet_proto::bounds::{
    MAX_DATA_BYTES, MAX_DATA_COLUMNS, MAX_DATA_ROWS, MAX_GRPC_DESCRIPTORS_BYTES,
};
use loadfleet_proto::grpc;
use toml::Spanned;

use super::check::Check;
use super::placeholders::Placeholders;

/// The bytes of a `body_file`; a UTF-8 body must also be a valid template
/// over `names`. Mistakes are recorded against `field`, and leave the
/// body empty.
pub(super) fn body_file(
    c: &mut Check<'_>,
    field: &str,
    bf: &Spanned<String>,
    names: &Placeholders<'_>,
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
                if let Err(e) = names.parse(text) {
                    c.err(field, Some(bf.span()), e);
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

/// A gRPC `message_file`: read as a [`body_file`], and refused unless it is
/// UTF-8, since the message is JSON.
pub(super) fn message_file(
    c: &mut Check<'_>,
    field: &str,
    file: &Spanned<String>,
    names: &Placeholders<'_>,
    base: &Path,
) -> Vec<u8> {
    let bytes = body_file(c, field, file, names, base);
    if std::str::from_utf8(&bytes).is_err() {
        c.err(
            field,
            Some(file.span()),
            "is not UTF-8 text; the message is JSON",
        );
    }
    bytes
}

/// A CSV data file: its header row (the column names) and its rows.
pub(super) fn data_table(path: &Path) -> Result<(Vec<String>, Vec<Vec<String>>), String> {
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

/// A descriptor set file (an encoded `FileDescriptorSet`), bounded, and
/// refused unless it decodes.
pub(super) fn descriptor_set(path: &Path) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if meta.len() > MAX_GRPC_DESCRIPTORS_BYTES as u64 {
        return Err(format!(
            "{shown} is {} bytes, more than the {MAX_GRPC_DESCRIPTORS_BYTES} that can be shipped to agents; build a set of only the services the plan calls",
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    grpc::decode_descriptors(&bytes).map_err(|e| {
        format!("{shown}: {e}; make it with protoc --include_imports -o FILE or buf build -o FILE")
    })?;
    Ok(bytes)
}
