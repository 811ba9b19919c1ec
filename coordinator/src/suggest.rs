//! "Did you mean": the valid word closest to a misspelt one, for plan keys,
//! plan values and threshold names (clap does the same for flags and
//! subcommands). One measure for all, so a plan key and a threshold name
//! misspelt alike are answered alike.

/// How alike two words must be (normalized Damerau-Levenshtein: 1 the
/// same, 0 nothing in common) for one to be offered for the other. At 0.6
/// one slip in a word of three letters (`rat` for `rate`) or two in one of
/// five is offered; `xyz` for `max` is not, since a guess that far off
/// misleads more than it helps.
const LEAST_LIKENESS: f64 = 0.6;

/// The candidate closest to `word`, ignoring case, when it is close enough
/// to be what was meant; the first such on a tie.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    let mut best: Option<(&str, f64)> = None;
    for c in candidates {
        let likeness = strsim::normalized_damerau_levenshtein(&word, &c.to_ascii_lowercase());
        if likeness >= LEAST_LIKENESS && best.is_none_or(|(_, b)| likeness > b) {
            best = Some((c, likeness));
        }
    }
    best.map(|(c, _)| c)
}

/// `; did you mean `timeout`?` for [`closest`], or nothing: the tail of a
/// message that already names the mistake.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    closest(word, candidates).map_or_else(String::new, |c| format!("; did you mean `{c}`?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_the_closest_word_when_it_is_close() {
        let keys = ["url", "timeout", "max_in_flight", "rate", "max", "duration"];
        for (typo, meant) in [
            ("timout", Some("timeout")),
            ("rat", Some("rate")),
            ("Rate", Some("rate")),
            ("max_inflight", Some("max_in_flight")),
            ("durration", Some("duration")),
            ("xyz", None),
            ("completely_else", None),
        ] {
            assert_eq!(closest(typo, keys), meant, "{typo}");
        }
        assert_eq!(did_you_mean("timout", keys), "; did you mean `timeout`?");
        assert_eq!(did_you_mean("xyz", keys), "");
    }
}
