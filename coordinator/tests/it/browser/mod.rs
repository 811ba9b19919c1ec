//! Headless Chromium for the HTML report's tests: a screenshot of a page
//! at a given window size, decoded to pixels the tests can look at.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::run;

/// Fails, pointing at scripts/test.sh, when there is no Chromium: a render check
/// that silently passes without a browser checks nothing.
pub(crate) fn require_chromium() {
    let found = Command::new("chromium")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "`chromium` is needed to render report.html headlessly; scripts/test.sh installs it \
         (apt-get install chromium)"
    );
}

/// Renders `html` in a `width` × `height` window into `png`.
pub(crate) fn screenshot(html: &Path, png: &Path, profile: &Path, width: u32, height: u32) {
    let mut cmd = Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ])
    .arg(format!("--window-size={width},{height}"))
    .arg(format!("--user-data-dir={}", profile.display()))
    .arg(format!("--screenshot={}", png.display()))
    .arg(format!("file://{}", html.display()));
    // `run` kills the browser by its handle if it hangs.
    let (status, output) = run(cmd, "chromium", Duration::from_secs(90));
    assert!(
        status.success() && png.is_file(),
        "chromium did not write {}:\n{output}",
        png.display()
    );
}

pub(crate) struct Image {
    pub width: usize,
    pub pixels: Vec<[u8; 3]>,
}

impl Image {
    /// The x of every pixel within `tolerance` of `colour`.
    pub(crate) fn xs_of(&self, colour: [u8; 3], tolerance: u8) -> Vec<usize> {
        self.pixels
            .iter()
            .enumerate()
            .filter(|(_, p)| near(**p, colour, tolerance))
            .map(|(i, _)| i % self.width)
            .collect()
    }
}

pub(crate) fn decode(path: &Path) -> Image {
    let file = std::fs::File::open(path).expect("open screenshot");
    let mut decoder = png::Decoder::new(file);
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().expect("PNG header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    let channels = info.color_type.samples();
    let pixels = buf[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| match channels {
            1 | 2 => [p[0], p[0], p[0]],
            _ => [p[0], p[1], p[2]],
        })
        .collect();
    Image {
        width: info.width as usize,
        pixels,
    }
}

pub(crate) fn near(p: [u8; 3], c: [u8; 3], tolerance: u8) -> bool {
    p.iter().zip(c).all(|(a, b)| a.abs_diff(b) <= tolerance)
}
