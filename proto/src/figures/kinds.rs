//! The kinds of figure a snapshot carries, each with its one way to be
//! read off the wire, written to it and added: plain counts, counts keyed by
//! a vocabulary word or a status code, histograms (one, or one per outcome
//! class), a mean, and the fan-out receipts.

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;

use hdrhistogram::Histogram;

use super::FigureError;
use crate::bounds::{MAX_CHECKS_PER_STEP, MAX_FANOUT_IDS, MAX_FANOUT_ID_BYTES, MAX_SNAPSHOT_COUNT};
use crate::histogram::{decode as decode_histogram, encode, new_histogram};
use crate::v1;
use crate::vocab::{OutcomeClass, Word};

/// One figure of a snapshot: how it is read from its wire field (checked,
/// before anything is added), written back, and added to another.
pub trait Figure: Sized {
    /// The wire field's type.
    type Wire;
    /// Whether it is a count (a per-agent row keeps counts only; a
    /// histogram per agent would cost memory no report reads).
    const COUNT: bool = true;
    /// Nothing counted yet.
    fn empty() -> Self;
    /// The figure of a wire field named `field`, refused with a named error
    /// when out of bounds.
    fn decode(wire: &Self::Wire, field: &'static str) -> Result<Self, FigureError>;
    /// The wire field; [`Figure::decode`] of it gives back an equal figure.
    fn encode(&self) -> Self::Wire;
    /// Adds `other` in; the order and grouping of additions never matter.
    fn add(&mut self, other: &Self);
    /// The same figure (histograms compare by what they hold, not by how
    /// far they have grown).
    fn same(&self, other: &Self) -> bool;
    /// Back to nothing counted, keeping what it allocated, so a recorder
    /// that reuses its figures allocates nothing once warm.
    fn reset(&mut self);
    /// Whether adding this into `total` keeps every count exact. `add`
    /// saturates, so a merge can never wrap; the fleet asks this first and
    /// refuses a snapshot that would clip a run's total instead.
    fn fits_into(&self, total: &Self) -> bool {
        let _ = total;
        true
    }
}

/// One count within [`MAX_SNAPSHOT_COUNT`].
fn count(n: u64, field: &'static str) -> Result<u64, FigureError> {
    if n > MAX_SNAPSHOT_COUNT {
        return Err(FigureError::OutOfRange {
            field,
            detail: format!("{n} is more than {MAX_SNAPSHOT_COUNT} in one snapshot"),
        });
    }
    Ok(n)
}

/// A plain count. Sums saturate: the fleet's checks keep every total below
/// the top, and saturating keeps addition associative if one ever got there.
impl Figure for u64 {
    type Wire = u64;
    fn empty() -> Self {
        0
    }
    fn decode(wire: &u64, field: &'static str) -> Result<Self, FigureError> {
        count(*wire, field)
    }
    fn encode(&self) -> u64 {
        *self
    }
    fn add(&mut self, other: &Self) {
        *self = self.saturating_add(*other);
    }
    fn same(&self, other: &Self) -> bool {
        self == other
    }
    fn reset(&mut self) {
        *self = 0;
    }
    fn fits_into(&self, total: &Self) -> bool {
        total.checked_add(*self).is_some()
    }
}

/// A plausible non-negative amount of seconds (CPU time).
impl Figure for f64 {
    type Wire = f64;
    fn empty() -> Self {
        0.0
    }
    fn decode(wire: &f64, field: &'static str) -> Result<Self, FigureError> {
        plausible(*wire, field)
    }
    fn encode(&self) -> f64 {
        *self
    }
    fn add(&mut self, other: &Self) {
        *self += other;
    }
    fn same(&self, other: &Self) -> bool {
        self == other
    }
    fn reset(&mut self) {
        *self = 0.0;
    }
}

fn plausible(v: f64, field: &'static str) -> Result<f64, FigureError> {
    if !(0.0..=1e9).contains(&v) {
        return Err(FigureError::OutOfRange {
            field,
            detail: format!("{v} is not a plausible figure"),
        });
    }
    Ok(v)
}

/// The mean of samples that each snapshot carries one of (0 on the wire
/// for none), kept as their sum and number so that means of any groups
/// add up to the mean of all.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Mean {
    pub sum: f64,
    pub samples: u64,
}

impl Mean {
    /// The mean, `None` without a sample.
    pub fn get(&self) -> Option<f64> {
        (self.samples > 0).then(|| self.sum / self.samples as f64)
    }
}

impl Figure for Mean {
    type Wire = f64;
    fn empty() -> Self {
        Mean::default()
    }
    fn decode(wire: &f64, field: &'static str) -> Result<Self, FigureError> {
        let v = plausible(*wire, field)?;
        Ok(Mean {
            sum: v,
            samples: u64::from(v > 0.0),
        })
    }
    fn encode(&self) -> f64 {
        self.get().unwrap_or(0.0)
    }
    fn add(&mut self, other: &Self) {
        self.sum += other.sum;
        self.samples = self.samples.saturating_add(other.samples);
    }
    fn same(&self, other: &Self) -> bool {
        self == other
    }
    fn reset(&mut self) {
        *self = Mean::default();
    }
}

/// A count per word of vocabulary `K`, at the word's index: counting one
/// is an array index, with no lookup and no allocation. `N` is the size of
/// the vocabulary, given once by each alias in [`super`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Counts<K, const N: usize> {
    counts: [u64; N],
    word: PhantomData<K>,
}

impl<K: Word, const N: usize> Default for Counts<K, N> {
    fn default() -> Self {
        Counts {
            counts: [0; N],
            word: PhantomData,
        }
    }
}

impl<K: Word, const N: usize> std::fmt::Debug for Counts<K, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Word, const N: usize> Counts<K, N> {
    /// Counts `n` more of `word`.
    #[inline]
    pub fn add(&mut self, word: K, n: u64) {
        let c = &mut self.counts[word.index()];
        *c = c.saturating_add(n);
    }

    /// Counts one more of `word`.
    #[inline]
    pub fn bump(&mut self, word: K) {
        self.add(word, 1);
    }

    /// Counts `n` fewer of `word`, never below none: a booking revised
    /// when later figures show what it guessed.
    pub fn take(&mut self, word: K, n: u64) {
        let c = &mut self.counts[word.index()];
        *c = c.saturating_sub(n);
    }

    pub fn get(&self, word: K) -> u64 {
        self.counts[word.index()]
    }

    /// Every word counted, in report order, with its count.
    pub fn iter(&self) -> impl Iterator<Item = (K, u64)> + '_ {
        K::ALL
            .iter()
            .zip(&self.counts)
            .filter(|(_, &n)| n > 0)
            .map(|(&k, &n)| (k, n))
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &n| a.saturating_add(n))
    }

    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|&n| n == 0)
    }

    /// The counts keyed by each word's string form, as reports write them.
    pub fn by_word(&self) -> BTreeMap<String, u64> {
        self.iter()
            .map(|(k, n)| (k.as_str().to_owned(), n))
            .collect()
    }

    pub fn reset(&mut self) {
        self.counts = [0; N];
    }
}

impl<K: Word, const N: usize> Figure for Counts<K, N> {
    type Wire = HashMap<String, u64>;
    fn empty() -> Self {
        Self::default()
    }
    fn decode(wire: &Self::Wire, field: &'static str) -> Result<Self, FigureError> {
        let mut out = Self::default();
        for (word, &n) in wire {
            let k: K = word
                .parse()
                .map_err(|word| FigureError::UnknownWord { field, word })?;
            out.add(k, count(n, field)?);
        }
        Ok(out)
    }
    fn encode(&self) -> Self::Wire {
        self.iter()
            .map(|(k, n)| (k.as_str().to_owned(), n))
            .collect()
    }
    fn add(&mut self, other: &Self) {
        for (c, &n) in self.counts.iter_mut().zip(&other.counts) {
            *c = c.saturating_add(n);
        }
    }
    fn same(&self, other: &Self) -> bool {
        self == other
    }
    fn reset(&mut self) {
        Counts::reset(self);
    }
    fn fits_into(&self, total: &Self) -> bool {
        self.counts
            .iter()
            .zip(&total.counts)
            .all(|(n, t)| t.checked_add(*n).is_some())
    }
}

/// Counts per HTTP status code, in increasing code order. A handful of
/// codes per interval, so a scan of a short list beats hashing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Codes(Vec<(u16, u64)>);

impl Codes {
    /// Counts `n` more of `code`.
    #[inline]
    pub fn add(&mut self, code: u16, n: u64) {
        match self.0.iter_mut().find(|(c, _)| *c == code) {
            Some((_, count)) => *count = count.saturating_add(n),
            None => {
                let at = self.0.partition_point(|(c, _)| *c < code);
                self.0.insert(at, (code, n));
            }
        }
    }

    #[inline]
    pub fn bump(&mut self, code: u16) {
        self.add(code, 1);
    }

    pub fn get(&self, code: u16) -> u64 {
        self.0
            .iter()
            .find(|(c, _)| *c == code)
            .map_or(0, |(_, n)| *n)
    }

    /// Every code counted, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.0.iter().copied()
    }

    pub fn total(&self) -> u64 {
        self.0.iter().fold(0u64, |a, (_, n)| a.saturating_add(*n))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The counts keyed by the code's digits, as reports write them.
    pub fn by_word(&self) -> BTreeMap<String, u64> {
        self.iter().map(|(c, n)| (c.to_string(), n)).collect()
    }

    /// Empties it, keeping its allocation.
    pub fn reset(&mut self) {
        self.0.clear();
    }
}

impl Figure for Codes {
    type Wire = HashMap<u32, u64>;
    fn empty() -> Self {
        Codes::default()
    }
    fn decode(wire: &Self::Wire, field: &'static str) -> Result<Self, FigureError> {
        let mut out = Codes(Vec::with_capacity(wire.len()));
        for (&code, &n) in wire {
            let code = u16::try_from(code)
                .ok()
                .filter(|c| (100..=999).contains(c))
                .ok_or(FigureError::BadStatus { field, code })?;
            let n = count(n, field)?;
            if n > 0 {
                out.add(code, n);
            }
        }
        Ok(out)
    }
    fn encode(&self) -> Self::Wire {
        self.iter().map(|(c, n)| (u32::from(c), n)).collect()
    }
    fn add(&mut self, other: &Self) {
        for (code, n) in other.iter() {
            self.add(code, n);
        }
    }
    fn same(&self, other: &Self) -> bool {
        self == other
    }
    fn reset(&mut self) {
        Codes::reset(self);
    }
    fn fits_into(&self, total: &Self) -> bool {
        self.iter()
            .all(|(code, n)| total.get(code).checked_add(n).is_some())
    }
}

/// Counts by a small index (a check's place in its step's checks), below
/// [`MAX_CHECKS_PER_STEP`]: an index beyond it is refused, so a peer
/// cannot grow the list.
#[derive(Debug, Clone, Default)]
pub struct ByIndex(Vec<u64>);

impl ByIndex {
    /// Counts `n` more at `index`; an index at or beyond the bound is not
    /// counted (the plan's checks are bounded by it on both sides).
    pub fn add(&mut self, index: usize, n: u64) {
        if index >= MAX_CHECKS_PER_STEP {
            return;
        }
        if self.0.len() <= index {
            self.0.resize(index + 1, 0);
        }
        self.0[index] = self.0[index].saturating_add(n);
    }

    pub fn get(&self, index: usize) -> u64 {
        self.0.get(index).copied().unwrap_or(0)
    }

    /// Every index with a count, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.0.iter().copied().enumerate().filter(|(_, n)| *n > 0)
    }

    pub fn total(&self) -> u64 {
        self.0.iter().fold(0u64, |a, n| a.saturating_add(*n))
    }
}

impl Figure for ByIndex {
    type Wire = HashMap<u32, u64>;
    fn empty() -> Self {
        ByIndex::default()
    }
    fn decode(wire: &Self::Wire, field: &'static str) -> Result<Self, FigureError> {
        let mut out = ByIndex::default();
        for (&index, &n) in wire {
            let i = index as usize;
            if i >= MAX_CHECKS_PER_STEP {
                return Err(FigureError::OutOfRange {
                    field,
                    detail: format!("index {index} is not below {MAX_CHECKS_PER_STEP}"),
                });
            }
            out.add(i, count(n, field)?);
        }
        Ok(out)
    }
    fn encode(&self) -> Self::Wire {
        self.iter().map(|(i, n)| (i as u32, n)).collect()
    }
    fn add(&mut self, other: &Self) {
        for (i, n) in other.iter() {
            ByIndex::add(self, i, n);
        }
    }
    fn same(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
    fn reset(&mut self) {
        self.0.iter_mut().for_each(|n| *n = 0);
    }
    fn fits_into(&self, total: &Self) -> bool {
        self.iter()
            .all(|(i, n)| total.get(i).checked_add(n).is_some())
    }
}

/// Whether two histograms hold the same values (however far each grew).
fn same_histogram(a: &Histogram<u64>, b: &Histogram<u64>) -> bool {
    a.len() == b.len()
        && a.iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .eq(b
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value())))
}

/// A histogram of microseconds (or of a count), HdrHistogram V2 on the
/// wire ([`crate::histogram`]), added bucket by bucket.
impl Figure for Histogram<u64> {
    type Wire = Vec<u8>;
    const COUNT: bool = false;
    fn empty() -> Self {
        new_histogram()
    }
    fn decode(wire: &Vec<u8>, field: &'static str) -> Result<Self, FigureError> {
        decode_histogram(wire).map_err(|error| FigureError::Histogram { field, error })
    }
    /// Serializing into memory fails only for a count above `i64::MAX`,
    /// which the bounds on every count rule out: such a histogram would go
    /// as empty.
    fn encode(&self) -> Vec<u8> {
        encode(self).unwrap_or_default()
    }
    fn add(&mut self, other: &Self) {
        // Both auto-resize with the same precision: `add` cannot fail.
        let _ = Histogram::add(self, other);
    }
    fn same(&self, other: &Self) -> bool {
        same_histogram(self, other)
    }
    fn reset(&mut self) {
        Histogram::reset(self);
    }
}

/// Latency histograms per outcome class, each made on its class's first
/// value and kept (emptied) from then on, so recording is an index and a
/// class that never occurs costs nothing.
#[derive(Debug, Clone, Default)]
pub struct ByClass([Option<Histogram<u64>>; OutcomeClass::ALL.len()]);

impl ByClass {
    /// The histogram of `class`, made on first use.
    #[inline]
    pub fn get_mut(&mut self, class: OutcomeClass) -> &mut Histogram<u64> {
        self.0[class.index()].get_or_insert_with(new_histogram)
    }

    /// The histogram of `class`, when it holds anything.
    pub fn get(&self, class: OutcomeClass) -> Option<&Histogram<u64>> {
        self.0[class.index()].as_ref().filter(|h| !h.is_empty())
    }

    /// Every class that holds a value, in report order.
    pub fn iter(&self) -> impl Iterator<Item = (OutcomeClass, &Histogram<u64>)> {
        OutcomeClass::ALL
            .iter()
            .zip(&self.0)
            .filter_map(|(&c, h)| h.as_ref().filter(|h| !h.is_empty()).map(|h| (c, h)))
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// Every class together.
    pub fn all(&self) -> Histogram<u64> {
        let mut all = new_histogram();
        for (_, h) in self.iter() {
            Figure::add(&mut all, h);
        }
        all
    }

    /// Empties every histogram, keeping what each allocated.
    pub fn reset(&mut self) {
        for h in self.0.iter_mut().flatten() {
            h.reset();
        }
    }
}

impl Figure for ByClass {
    type Wire = HashMap<String, Vec<u8>>;
    const COUNT: bool = false;
    fn empty() -> Self {
        ByClass::default()
    }
    fn decode(wire: &Self::Wire, field: &'static str) -> Result<Self, FigureError> {
        // Every word first: an unknown one costs no histogram.
        let mut classes = Vec::with_capacity(wire.len());
        for (word, bytes) in wire {
            let class: OutcomeClass = word
                .parse()
                .map_err(|word| FigureError::UnknownWord { field, word })?;
            classes.push((class, bytes));
        }
        let mut out = ByClass::default();
        for (class, bytes) in classes {
            let h = <Histogram<u64> as Figure>::decode(bytes, field)?;
            if !h.is_empty() {
                out.0[class.index()] = Some(h);
            }
        }
        Ok(out)
    }
    fn encode(&self) -> Self::Wire {
        self.iter()
            .map(|(c, h)| (c.as_str().to_owned(), Figure::encode(h)))
            .collect()
    }
    fn add(&mut self, other: &Self) {
        for (class, h) in other.iter() {
            Figure::add(self.get_mut(class), h);
        }
    }
    fn same(&self, other: &Self) -> bool {
        OutcomeClass::ALL
            .iter()
            .all(|&c| match (self.get(c), other.get(c)) {
                (Some(a), Some(b)) => same_histogram(a, b),
                (None, None) => true,
                _ => false,
            })
    }
    fn reset(&mut self) {
        ByClass::reset(self);
    }
}

/// Receipts of one event id: subscribers, first and last receipt (ns after
/// the common start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipts {
    pub subscribers: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

impl Receipts {
    fn add(&mut self, other: &Receipts) {
        self.subscribers = self.subscribers.saturating_add(other.subscribers);
        self.first_ns = self.first_ns.min(other.first_ns);
        self.last_ns = self.last_ns.max(other.last_ns);
    }
}

/// Receipts per tracked event id: merging keeps the earliest first and
/// latest last receipt and adds the subscribers, whatever the order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fanout(pub BTreeMap<String, Receipts>);

impl Fanout {
    /// Adds one id's receipts.
    pub fn add_id(&mut self, id: &str, r: Receipts) {
        match self.0.get_mut(id) {
            Some(seen) => seen.add(&r),
            None => {
                self.0.insert(id.to_owned(), r);
            }
        }
    }
}

impl Figure for Fanout {
    type Wire = Vec<v1::SseFanout>;
    fn empty() -> Self {
        Fanout::default()
    }
    fn decode(wire: &Self::Wire, field: &'static str) -> Result<Self, FigureError> {
        if wire.len() > MAX_FANOUT_IDS {
            return Err(FigureError::OutOfRange {
                field,
                detail: format!("{} ids, more than {MAX_FANOUT_IDS}", wire.len()),
            });
        }
        let mut out = Fanout::default();
        for r in wire {
            if r.id.len() > MAX_FANOUT_ID_BYTES || r.first_ns > r.last_ns || r.subscribers == 0 {
                return Err(FigureError::BadFanout {
                    field,
                    detail: format!(
                        "id of {} bytes (at most {MAX_FANOUT_ID_BYTES}), {} subscribers, first {} last {}",
                        r.id.len(),
                        r.subscribers,
                        r.first_ns,
                        r.last_ns
                    ),
                });
            }
            let r2 = Receipts {
                subscribers: count(r.subscribers, field)?,
                first_ns: r.first_ns,
                last_ns: r.last_ns,
            };
            out.add_id(&r.id, r2);
        }
        Ok(out)
    }
    fn encode(&self) -> Self::Wire {
        self.0
            .iter()
            .map(|(id, r)| v1::SseFanout {
                id: id.clone(),
                subscribers: r.subscribers,
                first_ns: r.first_ns,
                last_ns: r.last_ns,
            })
            .collect()
    }
    fn add(&mut self, other: &Self) {
        for (id, r) in &other.0 {
            self.add_id(id, *r);
        }
    }
    fn same(&self, other: &Self) -> bool {
        self == other
    }
    fn reset(&mut self) {
        self.0.clear();
    }
}
