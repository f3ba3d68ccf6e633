//! The rule classifier of one policy layer: finds the winning rule for a packet's [`Fields`]
//! without scanning every rule.
//!
//! It is a tuple space search (the idea Open vSwitch's classifier is built on). Every rule is
//! filed under its *shape*: which fields it constrains with an exact value or an IP prefix, and
//! with which prefix length and address family. A shape holds a hash map from the masked field
//! values to the rules of that shape, sorted best first. A lookup masks the packet's fields once
//! per shape and probes one hash table per shape. Shapes are visited in an order fixed at build
//! time (in a route layer longest prefix first; elsewhere shapes with short buckets first, so
//! that long buckets are read last, under the bound of a rule already found), and a shape or a
//! bucket entry that cannot beat the rule already found is skipped. What cannot be hashed
//! (ranges, large sets, a second predicate on an already keyed field) is checked on the
//! candidates a probe returns, by the same semantics as [`Predicate::matches`]. Small sets are
//! expanded into one exact entry per value. Rules that set `dir` are filed only in that
//! direction's tables.
//!
//! Cost: one probe per shape at most (a shape is a distinct combination of constrained fields
//! and prefix lengths, a few to a few tens in practice), plus the residual checks of the
//! candidates read. Rules told apart only by ranges (many port ranges under one protocol) share
//! a bucket and are read one by one; range-to-prefix expansion is not done.
//!
//! The answer is, by construction and by property test, the one [`linear_lookup`] gives: the
//! matching rule with the lowest `(priority, id)` (then the lowest index in the slice), or in a
//! route layer the one with the longest `ip.dst` prefix first ([`lpm_len`]).
//!
//! It is not incremental: a changed rule set is a new [`Classifier`] built on the slow path
//! and published by the caller (epoch swap). `build` allocates; `lookup` never does, takes no
//! lock and never panics.

use crate::key::Direction;
use crate::policy::{Field, Fields, Matcher, Predicate, Rule, Value};
use core::net::IpAddr;
use hashbrown::{HashMap, HashTable};

/// Number of 64-bit words of a [`Key`].
const WORDS: usize = 12;
/// Words 0-1: inner IP source; 2-3: inner IP destination; 4-5: outer source; 6-7: outer
/// destination (each a `u128`, IPv4 in the low 32 bits).
const W_IP_SRC: usize = 0;
const W_IP_DST: usize = 2;
const W_OUTER_SRC: usize = 4;
const W_OUTER_DST: usize = 6;
/// Word 8: inner Ethernet source; word 9: inner Ethernet destination (48 bits each).
const W_ETH_SRC: usize = 8;
const W_ETH_DST: usize = 9;
/// Word 10: EtherType << 48 | protocol << 32 | L4 source << 16 | L4 destination.
const W_SMALL: usize = 10;
/// Word 11: VNI.
const W_VNI: usize = 11;

/// Presence bytes of [`Probe::fams`]: byte 0..=3 are the four IP fields (0 absent, 4 IPv4,
/// 6 IPv6), byte 4 is the VNI (0 absent, 1 present).
const FAM_V4: u64 = 4;
const FAM_V6: u64 = 6;
const FAM_PRESENT: u64 = 1;
const FAM_VNI_BYTE: u32 = 4;

/// Largest set expanded into exact entries; larger sets are checked on candidates.
const MAX_SET_EXPAND: usize = 16;
/// Most exact entries one rule may expand into (product of its expanded sets).
const MAX_EXPANSION: usize = 64;

/// Field values laid out as words, masked per shape and hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
struct Key([u64; WORDS]);

impl Key {
    fn or(&mut self, other: &Key) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a |= b;
        }
    }
}

/// Where a field lives in a [`Key`].
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// A `u128` IP address at `word` and `word + 1`, presence byte `fam`.
    Ip { word: usize, fam: u32 },
    /// A MAC at `word`.
    Mac { word: usize },
    /// An integer of `bits` bits at `shift` in the word `word`; `fam` is its presence byte when
    /// the field can be absent.
    Int { word: usize, shift: u32, bits: u32, fam: Option<u32> },
}

const fn slot(field: Field) -> Slot {
    match field {
        Field::IpSrc => Slot::Ip { word: W_IP_SRC, fam: 0 },
        Field::IpDst => Slot::Ip { word: W_IP_DST, fam: 1 },
        Field::OuterIpSrc => Slot::Ip { word: W_OUTER_SRC, fam: 2 },
        Field::OuterIpDst => Slot::Ip { word: W_OUTER_DST, fam: 3 },
        Field::EthSrc => Slot::Mac { word: W_ETH_SRC },
        Field::EthDst => Slot::Mac { word: W_ETH_DST },
        Field::EtherType => Slot::Int { word: W_SMALL, shift: 48, bits: 16, fam: None },
        Field::IpProto => Slot::Int { word: W_SMALL, shift: 32, bits: 8, fam: None },
        Field::L4Src => Slot::Int { word: W_SMALL, shift: 16, bits: 16, fam: None },
        Field::L4Dst => Slot::Int { word: W_SMALL, shift: 0, bits: 16, fam: None },
        Field::Vni => Slot::Int { word: W_VNI, shift: 0, bits: 32, fam: Some(FAM_VNI_BYTE) },
    }
}

fn mac_word(m: [u8; 6]) -> u64 {
    m.iter().fold(0u64, |acc, b| acc << 8 | u64::from(*b))
}

/// An address as `(family code, u128)`.
fn ip_bits(ip: IpAddr) -> (u64, u128) {
    match ip {
        IpAddr::V4(a) => (FAM_V4, u128::from(u32::from(a))),
        IpAddr::V6(a) => (FAM_V6, u128::from(a)),
    }
}

fn put_u128(k: &mut [u64; WORDS], word: usize, x: u128) {
    if let Some(w) = k.get_mut(word..word + 2) {
        w[0] = (x >> 64) as u64;
        w[1] = x as u64;
    }
}

/// The packet side of a lookup: all field values and which optional fields are present.
#[derive(Debug, Clone, Copy)]
struct Probe {
    key: Key,
    fams: u64,
}

impl Probe {
    fn new(f: &Fields) -> Probe {
        let mut k = [0u64; WORDS];
        let mut fams = 0u64;
        for (ip, word, byte) in [
            (f.ip_src, W_IP_SRC, 0u32),
            (f.ip_dst, W_IP_DST, 1),
            (f.outer_src, W_OUTER_SRC, 2),
            (f.outer_dst, W_OUTER_DST, 3),
        ] {
            if let Some(ip) = ip {
                let (fam, bits) = ip_bits(ip);
                fams |= fam << (8 * byte);
                put_u128(&mut k, word, bits);
            }
        }
        k[W_ETH_SRC] = mac_word(f.eth_src);
        k[W_ETH_DST] = mac_word(f.eth_dst);
        k[W_SMALL] = u64::from(f.ethertype) << 48
            | u64::from(f.proto) << 32
            | u64::from(f.l4_src) << 16
            | u64::from(f.l4_dst);
        if let Some(v) = f.vni {
            k[W_VNI] = u64::from(v);
            fams |= FAM_PRESENT << (8 * FAM_VNI_BYTE);
        }
        Probe { key: Key(k), fams }
    }
}

/// What one hashable predicate contributes to a shape and its key.
#[derive(Debug, Clone, Copy, Default)]
struct Part {
    mask: Key,
    value: Key,
    fam_mask: u64,
    fam_req: u64,
    /// Prefix length for IP fields (to key the longest of several), 0 otherwise.
    len: u8,
}

/// The exact hash-map representation of `field` matched by `m`, or `None` when `m` is not an
/// exact value or prefix of the field's type. For `Exact`, `None` means the predicate can
/// never match.
fn key_part(field: Field, m: &Matcher) -> Option<Part> {
    let mut p = Part::default();
    match (slot(field), m) {
        (Slot::Ip { word, fam }, Matcher::Exact(Value::Ip(ip))) => {
            let (code, bits) = ip_bits(*ip);
            put_u128(&mut p.mask.0, word, u128::MAX);
            put_u128(&mut p.value.0, word, bits);
            p.fam_mask = 0xff << (8 * fam);
            p.fam_req = code << (8 * fam);
            p.len = if code == FAM_V4 { 32 } else { 128 };
        }
        (Slot::Ip { word, fam }, Matcher::Prefix(ip, len)) => {
            let (code, bits) = ip_bits(*ip);
            let len32 = u32::from(*len);
            let mask = match code {
                FAM_V4 if len32 <= 32 => {
                    if len32 == 0 {
                        0
                    } else {
                        u128::from(u32::MAX << (32 - len32))
                    }
                }
                FAM_V6 if len32 <= 128 => {
                    if len32 == 0 {
                        0
                    } else {
                        u128::MAX << (128 - len32)
                    }
                }
                _ => return None,
            };
            put_u128(&mut p.mask.0, word, mask);
            put_u128(&mut p.value.0, word, bits & mask);
            p.fam_mask = 0xff << (8 * fam);
            p.fam_req = code << (8 * fam);
            p.len = *len;
        }
        (Slot::Mac { word }, Matcher::Exact(Value::Mac(mac))) => {
            p.mask.0[word] = 0xffff_ffff_ffff;
            p.value.0[word] = mac_word(*mac);
        }
        (Slot::Int { word, shift, bits, fam }, Matcher::Exact(Value::Int(n))) => {
            let max = (1u64 << bits) - 1;
            if *n > max {
                return None;
            }
            p.mask.0[word] = max << shift;
            p.value.0[word] = n << shift;
            if let Some(b) = fam {
                p.fam_mask = 0xff << (8 * b);
                p.fam_req = FAM_PRESENT << (8 * b);
            }
        }
        _ => return None,
    }
    Some(p)
}

/// An integer field read directly by a range check.
#[derive(Debug, Clone, Copy)]
enum IntField {
    EtherType,
    Proto,
    L4Src,
    L4Dst,
    Vni,
}

impl IntField {
    fn of(field: Field) -> Option<IntField> {
        Some(match field {
            Field::EtherType => IntField::EtherType,
            Field::IpProto => IntField::Proto,
            Field::L4Src => IntField::L4Src,
            Field::L4Dst => IntField::L4Dst,
            Field::Vni => IntField::Vni,
            _ => return None,
        })
    }

    #[inline]
    fn get(self, f: &Fields) -> Option<u64> {
        Some(match self {
            IntField::EtherType => u64::from(f.ethertype),
            IntField::Proto => u64::from(f.proto),
            IntField::L4Src => u64::from(f.l4_src),
            IntField::L4Dst => u64::from(f.l4_dst),
            IntField::Vni => u64::from(f.vni?),
        })
    }
}

/// A predicate left to check on the candidates of a probe.
#[derive(Debug, Clone)]
enum Check {
    /// An integer field inside an inclusive range.
    Range { field: IntField, lo: u64, hi: u64 },
    /// Anything else, by its reference semantics.
    Pred(Predicate),
}

impl Check {
    fn compile(p: &Predicate) -> Check {
        match (&p.matcher, IntField::of(p.field)) {
            (Matcher::Range(lo, hi), Some(field)) => Check::Range { field, lo: *lo, hi: *hi },
            _ => Check::Pred(p.clone()),
        }
    }

    #[inline]
    fn matches(&self, f: &Fields) -> bool {
        match self {
            Check::Range { field, lo, hi } => field.get(f).is_some_and(|n| *lo <= n && n <= *hi),
            Check::Pred(p) => p.matches(f),
        }
    }
}

/// One rule in one bucket of one shape.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Position of the rule in the winning order (lower wins).
    rank: usize,
    /// Index of the rule in the slice given to [`Classifier::build`].
    rule: usize,
    /// The rule's residual checks, a range of [`Classifier::checks`].
    checks: (usize, usize),
}

/// A group of rules that constrain the same fields the same way.
#[derive(Debug, Clone)]
struct Shape {
    fam_mask: u64,
    fam_req: u64,
    /// Best rank of any entry in the shape: a shape that cannot beat the rule found so far is
    /// skipped.
    best: usize,
    /// Length of the shape's longest bucket.
    longest: usize,
    /// Number of key words the shape constrains; 0 means every entry is in `all` and no hash
    /// is needed.
    nwords: usize,
    /// Which words of a [`Key`] the shape constrains (the first `nwords`), and their masks.
    words: [u8; WORDS],
    masks: [u64; WORDS],
    all: (usize, usize),
    /// The masked words of every bucket beyond the first [`INLINE`], `nwords - INLINE` each.
    keys: Vec<u64>,
    /// Buckets, hashed by [`hash_word`] over their masked words in order.
    buckets: HashTable<Bucket>,
}

/// Masked key words stored in the bucket itself (enough for an IPv6 address and the word of
/// protocol and ports); the rest live in [`Shape::keys`].
const INLINE: usize = 3;

/// The rules of one shape that share one masked key.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// The first masked words of the key (zero beyond `nwords`).
    key: [u64; INLINE],
    /// Offset of the bucket's further masked words in [`Shape::keys`].
    more: usize,
    /// Range of [`Table::entries`], sorted by rank.
    entries: (usize, usize),
}

const HASH_SEED: u64 = 0x243f_6a88_85a3_08d3;
const HASH_MUL: u64 = 0x9e37_79b9_7f4a_7c15;

/// Mixes one more word into a hash: a folded 128-bit multiply.
#[inline(always)]
fn hash_word(h: u64, w: u64) -> u64 {
    let p = u128::from(h ^ w) * u128::from(HASH_MUL);
    (p as u64) ^ ((p >> 64) as u64)
}

impl Shape {
    /// The shape's words of a packet's key, masked, and their hash.
    #[inline]
    fn probe_words(&self, key: &Key, out: &mut [u64; WORDS]) -> u64 {
        let mut h = HASH_SEED;
        for ((o, &w), m) in out.iter_mut().zip(&self.words).zip(&self.masks).take(self.nwords) {
            *o = key.0.get(usize::from(w)).copied().unwrap_or(0) & m;
            h = hash_word(h, *o);
        }
        h
    }

    /// The entry range of the bucket `key` falls into, if any.
    #[inline]
    fn find(&self, key: &Key) -> Option<(usize, usize)> {
        if self.nwords == 0 {
            return Some(self.all);
        }
        let mut q = [0u64; WORDS];
        let h = self.probe_words(key, &mut q);
        let (head, tail) = q.split_at(INLINE);
        let tail = tail.get(..self.nwords.saturating_sub(INLINE))?;
        // Word-by-word comparison: a slice `==` here compiles to a `bcmp` call that costs more
        // than the rest of the probe.
        let b = self.buckets.find(h, |b| {
            b.key.iter().zip(head).all(|(x, y)| x == y)
                && (tail.is_empty()
                    || self
                        .keys
                        .get(b.more..b.more + tail.len())
                        .is_some_and(|k| k.iter().zip(tail).all(|(x, y)| x == y)))
        })?;
        Some(b.entries)
    }
}

/// The shapes of one direction.
#[derive(Debug, Clone, Default)]
struct Table {
    /// In the order a lookup visits them (see [`Table::build`]).
    shapes: Vec<Shape>,
    entries: Vec<Entry>,
}

/// Identity of a shape while building.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ShapeId {
    mask: Key,
    fam_mask: u64,
    fam_req: u64,
}

type Buckets = HashMap<Key, Vec<Entry>>;

impl Table {
    fn build(groups: HashMap<ShapeId, Buckets>, lpm: bool) -> Table {
        let mut t = Table::default();
        for (id, buckets) in groups {
            let mut shape = Shape {
                fam_mask: id.fam_mask,
                fam_req: id.fam_req,
                best: usize::MAX,
                longest: 0,
                nwords: 0,
                words: [0; WORDS],
                masks: [0; WORDS],
                all: (0, 0),
                keys: Vec::new(),
                buckets: HashTable::new(),
            };
            for (w, m) in id.mask.0.iter().enumerate() {
                if *m != 0 {
                    shape.words[shape.nwords] = w as u8;
                    shape.masks[shape.nwords] = *m;
                    shape.nwords += 1;
                }
            }
            for (key, mut entries) in buckets {
                entries.sort_by_key(|e| (e.rank, e.rule));
                entries.dedup_by_key(|e| e.rule);
                let start = t.entries.len();
                shape.best = shape.best.min(entries.first().map_or(usize::MAX, |e| e.rank));
                shape.longest = shape.longest.max(entries.len());
                t.entries.extend(entries);
                let range = (start, t.entries.len());
                if shape.nwords == 0 {
                    shape.all = range;
                    continue;
                }
                let mut q = [0u64; WORDS];
                let h = shape.probe_words(&key, &mut q);
                let (head, tail) = q.split_at(INLINE);
                let more = shape.keys.len();
                shape.keys.extend_from_slice(&tail[..shape.nwords.saturating_sub(INLINE)]);
                let mut inline = [0u64; INLINE];
                inline.copy_from_slice(head);
                let bucket = Bucket { key: inline, more, entries: range };
                let (n, keys) = (shape.nwords, &shape.keys);
                shape.buckets.insert_unique(h, bucket, |b| {
                    let head = b.key.iter().take(n);
                    let tail = keys.get(b.more..b.more + n.saturating_sub(INLINE)).unwrap_or(&[]);
                    head.chain(tail).fold(HASH_SEED, |h, w| hash_word(h, *w))
                });
            }
            t.shapes.push(shape);
        }
        if lpm {
            // Longest prefixes first: a hit there bounds (and usually skips) the rest.
            t.shapes.sort_by_key(|s| s.best);
        } else {
            // Shapes whose buckets are short (exact keys, few candidates) go first; shapes with
            // long buckets (many rules told apart only by checks, such as port ranges) go last,
            // so that by then a good rule bounds how far their buckets are read.
            t.shapes.sort_by_key(|s| (s.longest, s.best));
        }
        t
    }
}

/// The classifier of one layer's rules: [`Classifier::lookup`] returns what [`linear_lookup`]
/// returns, in a handful of hash probes.
#[derive(Debug, Clone)]
pub struct Classifier {
    /// Outbound, inbound.
    tables: [Table; 2],
    /// Residual checks of all rules.
    checks: Vec<Check>,
    /// Rules given to `build`.
    len: usize,
}

const fn dir_index(dir: Direction) -> usize {
    match dir {
        Direction::Out => 0,
        Direction::In => 1,
    }
}

/// How a rule is filed: its fixed key part, the sets expanded into alternatives, and the
/// predicates left as checks.
struct Plan {
    base: Part,
    expansions: Vec<Vec<Part>>,
    residual: Vec<Check>,
}

/// Splits a rule's predicates into keyed ones and residual checks. `None` when the rule can
/// never match (a set none of whose values fits its field).
fn plan(rule: &Rule) -> Option<Plan> {
    let mut keyed: Vec<(Field, Option<usize>)> = Vec::new(); // field, index of keyed predicate
    let mut chosen: Vec<Option<Part>> = vec![None; rule.predicates.len()];
    // Pass 1: per field, the longest exact/prefix predicate becomes the key.
    for (i, p) in rule.predicates.iter().enumerate() {
        let Some(part) = key_part(p.field, &p.matcher) else { continue };
        match keyed.iter_mut().find(|(f, _)| *f == p.field) {
            Some((_, Some(j))) => {
                let better = chosen[*j].is_some_and(|c| part.len > c.len);
                if better {
                    chosen[*j] = None;
                    chosen[i] = Some(part);
                    *j = i;
                }
            }
            _ => {
                keyed.push((p.field, Some(i)));
                chosen[i] = Some(part);
            }
        }
    }
    // Pass 2: small sets on fields not keyed yet are expanded into alternatives.
    let mut expansions: Vec<Vec<Part>> = Vec::new();
    let mut expanded = vec![false; rule.predicates.len()];
    let mut product = 1usize;
    for (i, p) in rule.predicates.iter().enumerate() {
        let Matcher::Set(vals) = &p.matcher else { continue };
        let mut alts: Vec<(Value, Part)> = Vec::new();
        for v in vals {
            if let Some(part) = key_part(p.field, &Matcher::Exact(*v))
                && !alts.iter().any(|(w, _)| w == v)
            {
                alts.push((*v, part));
            }
        }
        if alts.is_empty() {
            return None;
        }
        if keyed.iter().any(|(f, _)| *f == p.field)
            || alts.len() > MAX_SET_EXPAND
            || product.saturating_mul(alts.len()) > MAX_EXPANSION
        {
            continue;
        }
        product *= alts.len();
        keyed.push((p.field, None));
        expanded[i] = true;
        expansions.push(alts.into_iter().map(|(_, part)| part).collect());
    }
    let mut base = Part::default();
    let mut residual = Vec::new();
    for (i, p) in rule.predicates.iter().enumerate() {
        if let Some(part) = chosen[i] {
            base.mask.or(&part.mask);
            base.value.or(&part.value);
            base.fam_mask |= part.fam_mask;
            base.fam_req |= part.fam_req;
        } else if !expanded[i] {
            residual.push(Check::compile(p));
        }
    }
    Some(Plan { base, expansions, residual })
}

impl Classifier {
    /// Build for one layer's rules (slow path; may allocate). `lpm` = true for route layers.
    pub fn build(rules: &[Rule], lpm: bool) -> Classifier {
        let mut order: Vec<usize> = (0..rules.len()).collect();
        order.sort_by_key(|&i| rank_key(&rules[i], i, lpm));
        let mut rank = vec![0usize; rules.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i] = r;
        }
        let mut groups: [HashMap<ShapeId, Buckets>; 2] = [HashMap::new(), HashMap::new()];
        let mut checks = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            let Some(plan) = plan(rule) else { continue };
            let start = checks.len();
            checks.extend(plan.residual);
            let entry = Entry { rank: rank[i], rule: i, checks: (start, checks.len()) };
            // Walk the cartesian product of the expanded sets.
            let mut idx = vec![0usize; plan.expansions.len()];
            loop {
                let mut part = plan.base;
                for (alts, &j) in plan.expansions.iter().zip(idx.iter()) {
                    let a = &alts[j];
                    part.mask.or(&a.mask);
                    part.value.or(&a.value);
                    part.fam_mask |= a.fam_mask;
                    part.fam_req |= a.fam_req;
                }
                let id =
                    ShapeId { mask: part.mask, fam_mask: part.fam_mask, fam_req: part.fam_req };
                for d in [Direction::Out, Direction::In] {
                    if rule.dir.is_none_or(|rd| rd == d) {
                        groups[dir_index(d)]
                            .entry(id)
                            .or_default()
                            .entry(part.value)
                            .or_default()
                            .push(entry);
                    }
                }
                // Next combination, or done.
                let mut k = 0;
                loop {
                    if k == idx.len() {
                        break;
                    }
                    idx[k] += 1;
                    if idx[k] < plan.expansions[k].len() {
                        break;
                    }
                    idx[k] = 0;
                    k += 1;
                }
                if k == idx.len() {
                    break;
                }
            }
        }
        let [out, inb] = groups;
        Classifier {
            tables: [Table::build(out, lpm), Table::build(inb, lpm)],
            checks,
            len: rules.len(),
        }
    }

    /// Index into `rules` (as given to build) of the winning rule, or None.
    pub fn lookup(&self, f: &Fields, dir: Direction) -> Option<usize> {
        let t = &self.tables[dir_index(dir)];
        if t.shapes.is_empty() {
            return None;
        }
        let probe = Probe::new(f);
        let mut best = usize::MAX;
        let mut found = None;
        for s in &t.shapes {
            if s.best >= best {
                continue;
            }
            if probe.fams & s.fam_mask != s.fam_req {
                continue;
            }
            let Some((a, b)) = s.find(&probe.key) else { continue };
            for e in t.entries.get(a..b).unwrap_or(&[]) {
                if e.rank >= best {
                    break;
                }
                let checks = self.checks.get(e.checks.0..e.checks.1).unwrap_or(&[]);
                if checks.iter().all(|c| c.matches(f)) {
                    best = e.rank;
                    found = Some(e.rule);
                    break;
                }
            }
        }
        found
    }

    /// Number of rules given to [`Classifier::build`] (including rules that can never match).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when built from no rules.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of shapes (hash probes at most) a lookup in direction `dir` walks.
    pub fn shapes(&self, dir: Direction) -> usize {
        self.tables[dir_index(dir)].shapes.len()
    }
}

/// The `ip.dst` prefix length by which a route layer ranks `rule`: the longest of its `ip.dst`
/// predicates, where an exact address counts as a full-length prefix (32 or 128) and a range,
/// a set or no `ip.dst` predicate at all counts as 0.
pub fn lpm_len(rule: &Rule) -> u8 {
    rule.predicates
        .iter()
        .filter(|p| p.field == Field::IpDst)
        .map(|p| match p.matcher {
            Matcher::Prefix(_, len) => len,
            Matcher::Exact(Value::Ip(IpAddr::V4(_))) => 32,
            Matcher::Exact(Value::Ip(IpAddr::V6(_))) => 128,
            _ => 0,
        })
        .max()
        .unwrap_or(0)
}

/// The order rules win in (lower wins): longest prefix first in a route layer, then priority,
/// then id, then position in the slice.
fn rank_key(rule: &Rule, index: usize, lpm: bool) -> (u8, u32, u32, usize) {
    let lpm_rank = if lpm { u8::MAX - lpm_len(rule) } else { 0 };
    (lpm_rank, rule.priority, rule.id, index)
}

/// The reference: a linear scan with the same semantics (also used by tests and the bench).
///
/// Of the rules that match ([`Rule::matches`]), the winner has the lowest `priority`, then the
/// lowest `id`, then the lowest index; with `lpm` the longest [`lpm_len`] comes before all.
pub fn linear_lookup(rules: &[Rule], f: &Fields, dir: Direction, lpm: bool) -> Option<usize> {
    let mut best: Option<((u8, u32, u32, usize), usize)> = None;
    for (i, rule) in rules.iter().enumerate() {
        if !rule.matches(f, dir) {
            continue;
        }
        let k = rank_key(rule, i, lpm);
        if best.is_none_or(|(b, _)| k < b) {
            best = Some((k, i));
        }
    }
    best.map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Action;
    use core::net::{Ipv4Addr, Ipv6Addr};
    use proptest::prelude::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    fn pred(field: Field, matcher: Matcher) -> Predicate {
        Predicate { field, matcher }
    }

    fn rule(id: u32, priority: u32, predicates: Vec<Predicate>) -> Rule {
        Rule { id, priority, dir: None, predicates, action: Action::Pass }
    }

    fn pkt(dst: IpAddr, proto: u8, dport: u16) -> Fields {
        Fields {
            ethertype: 0x0800,
            ip_src: Some(v4(192, 168, 0, 1)),
            ip_dst: Some(dst),
            proto,
            l4_src: 40000,
            l4_dst: dport,
            ..Fields::default()
        }
    }

    /// Checks the classifier against the linear scan for `f` in both directions, and returns
    /// the classifier's answer for `dir`.
    fn both(rules: &[Rule], lpm: bool, f: &Fields, dir: Direction) -> Option<usize> {
        let c = Classifier::build(rules, lpm);
        for d in [Direction::Out, Direction::In] {
            assert_eq!(c.lookup(f, d), linear_lookup(rules, f, d, lpm), "dir {d:?}");
        }
        c.lookup(f, dir)
    }

    #[test]
    fn lowest_priority_then_id_then_index_wins() {
        let any_tcp = || vec![pred(Field::IpProto, Matcher::Exact(Value::Int(6)))];
        let rules = vec![
            rule(9, 5, any_tcp()),
            rule(4, 5, vec![pred(Field::L4Dst, Matcher::Range(80, 90))]),
            rule(4, 5, any_tcp()),
            rule(1, 7, vec![]),
        ];
        let f = pkt(v4(10, 0, 0, 1), 6, 80);
        // Ids 4 (index 1 and 2) beat id 9; index 1 comes first.
        assert_eq!(both(&rules, false, &f, Direction::Out), Some(1));
        // Port 443 leaves only the tcp rules: id 4 at index 2.
        assert_eq!(both(&rules, false, &pkt(v4(10, 0, 0, 1), 6, 443), Direction::Out), Some(2));
        // UDP matches only the catch-all.
        assert_eq!(both(&rules, false, &pkt(v4(10, 0, 0, 1), 17, 443), Direction::In), Some(3));
    }

    #[test]
    fn route_layer_prefers_longest_prefix_over_priority() {
        let rules = vec![
            rule(1, 0, vec![pred(Field::IpDst, Matcher::Prefix(v4(10, 0, 0, 0), 8))]),
            rule(2, 50, vec![pred(Field::IpDst, Matcher::Prefix(v4(10, 1, 2, 0), 24))]),
            rule(3, 90, vec![pred(Field::IpDst, Matcher::Exact(Value::Ip(v4(10, 1, 2, 3))))]),
            rule(4, 10, vec![pred(Field::IpDst, Matcher::Prefix(v4(10, 1, 2, 0), 24))]),
            rule(5, 0, vec![pred(Field::IpDst, Matcher::Prefix(v4(0, 0, 0, 0), 0))]),
        ];
        let out = Direction::Out;
        // The exact address counts as a /32.
        assert_eq!(both(&rules, true, &pkt(v4(10, 1, 2, 3), 6, 1), out), Some(2));
        // Two /24s: priority 10 beats 50.
        assert_eq!(both(&rules, true, &pkt(v4(10, 1, 2, 4), 6, 1), out), Some(3));
        assert_eq!(both(&rules, true, &pkt(v4(10, 9, 9, 9), 6, 1), out), Some(0));
        assert_eq!(both(&rules, true, &pkt(v4(11, 0, 0, 1), 6, 1), out), Some(4));
        // Without LPM the lowest priority (then id) wins: rule 1.
        assert_eq!(both(&rules, false, &pkt(v4(10, 1, 2, 3), 6, 1), out), Some(0));
        // An IPv6 destination matches no IPv4 prefix, not even /0.
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert_eq!(both(&rules, true, &pkt(v6, 6, 1), out), None);
        assert_eq!(lpm_len(&rules[2]), 32);
        assert_eq!(lpm_len(&rules[4]), 0);
        assert_eq!(lpm_len(&rule(6, 0, vec![])), 0);
    }

    #[test]
    fn direction_restricts_a_rule() {
        let mut r0 = rule(0, 0, vec![]);
        r0.dir = Some(Direction::In);
        let rules = vec![r0, rule(1, 1, vec![])];
        let f = pkt(v4(10, 0, 0, 1), 6, 80);
        assert_eq!(both(&rules, false, &f, Direction::In), Some(0));
        assert_eq!(both(&rules, false, &f, Direction::Out), Some(1));
        let c = Classifier::build(&rules, false);
        assert_eq!(c.shapes(Direction::In), 1);
        assert_eq!(c.shapes(Direction::Out), 1);
    }

    #[test]
    fn absent_fields_match_nothing() {
        let rules = vec![
            rule(0, 0, vec![pred(Field::Vni, Matcher::Exact(Value::Int(7)))]),
            rule(1, 1, vec![pred(Field::Vni, Matcher::Range(0, u64::MAX))]),
            rule(2, 2, vec![pred(Field::OuterIpSrc, Matcher::Prefix(v4(0, 0, 0, 0), 0))]),
            rule(3, 3, vec![pred(Field::IpDst, Matcher::Prefix(v4(10, 0, 0, 0), 8))]),
        ];
        let mut f = pkt(v4(10, 0, 0, 1), 6, 80);
        assert_eq!(both(&rules, false, &f, Direction::Out), Some(3));
        f.ip_dst = None;
        assert_eq!(both(&rules, false, &f, Direction::Out), None);
        f.outer_src = Some(v4(1, 2, 3, 4));
        assert_eq!(both(&rules, false, &f, Direction::Out), Some(2));
        f.vni = Some(8);
        assert_eq!(both(&rules, false, &f, Direction::Out), Some(1));
        f.vni = Some(7);
        assert_eq!(both(&rules, false, &f, Direction::Out), Some(0));
    }

    #[test]
    fn small_sets_are_expanded_large_sets_checked() {
        let tcp_udp = Matcher::Set(vec![Value::Int(6), Value::Int(17), Value::Int(6)]);
        let many: Vec<Value> = (1000..1100).map(Value::Int).collect();
        let rules = vec![
            rule(0, 0, vec![pred(Field::IpProto, tcp_udp), pred(Field::L4Dst, Matcher::Set(many))]),
            rule(
                1,
                1,
                vec![pred(Field::L4Dst, Matcher::Set(vec![Value::Int(53), Value::Int(5353)]))],
            ),
        ];
        let c = Classifier::build(&rules, false);
        // Rule 0: proto expanded (one shape, two keys); rule 1: port expanded.
        assert_eq!(c.shapes(Direction::Out), 2);
        let out = Direction::Out;
        assert_eq!(both(&rules, false, &pkt(v4(1, 1, 1, 1), 17, 1050), out), Some(0));
        assert_eq!(both(&rules, false, &pkt(v4(1, 1, 1, 1), 6, 1099), out), Some(0));
        assert_eq!(both(&rules, false, &pkt(v4(1, 1, 1, 1), 1, 1050), out), None);
        assert_eq!(both(&rules, false, &pkt(v4(1, 1, 1, 1), 6, 1100), out), None);
        assert_eq!(both(&rules, false, &pkt(v4(1, 1, 1, 1), 6, 5353), out), Some(1));
    }

    #[test]
    fn rules_that_cannot_match_are_counted_but_never_win() {
        let rules = vec![
            // Empty set, wrong-typed set, proto out of range, IPv4 prefix longer than 32,
            // a range on an address, a prefix on a port.
            rule(0, 0, vec![pred(Field::IpProto, Matcher::Set(vec![]))]),
            rule(1, 0, vec![pred(Field::IpProto, Matcher::Set(vec![Value::Mac([0; 6])]))]),
            rule(2, 0, vec![pred(Field::IpProto, Matcher::Exact(Value::Int(256 + 6)))]),
            rule(3, 0, vec![pred(Field::IpDst, Matcher::Prefix(v4(10, 0, 0, 1), 33))]),
            rule(4, 0, vec![pred(Field::IpDst, Matcher::Range(0, u64::MAX))]),
            rule(5, 0, vec![pred(Field::L4Dst, Matcher::Prefix(v4(0, 0, 0, 0), 0))]),
            rule(6, 0, vec![pred(Field::L4Dst, Matcher::Range(90, 80))]),
            rule(7, 9, vec![]),
        ];
        let c = Classifier::build(&rules, true);
        assert_eq!(c.len(), 8);
        assert!(!c.is_empty());
        assert_eq!(both(&rules, true, &pkt(v4(10, 0, 0, 1), 6, 85), Direction::Out), Some(7));
        assert_eq!(both(&rules, false, &pkt(v4(10, 0, 0, 1), 6, 85), Direction::Out), Some(7));
    }

    #[test]
    fn empty_classifier_finds_nothing() {
        let c = Classifier::build(&[], false);
        assert!(c.is_empty());
        assert_eq!(c.len(), 0);
        assert_eq!(c.lookup(&Fields::default(), Direction::Out), None);
        assert_eq!(linear_lookup(&[], &Fields::default(), Direction::In, true), None);
    }

    #[test]
    fn one_shape_per_prefix_length_and_family() {
        let mut rules = Vec::new();
        for i in 0..100u8 {
            rules.push(rule(
                u32::from(i),
                5,
                vec![pred(Field::IpDst, Matcher::Prefix(v4(10, 0, i, 1), 32))],
            ));
            rules.push(rule(
                1000 + u32::from(i),
                5,
                vec![pred(Field::IpDst, Matcher::Prefix(v4(10, i, 0, 0), 24))],
            ));
        }
        let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0));
        rules.push(rule(5000, 5, vec![pred(Field::IpDst, Matcher::Prefix(v6, 32))]));
        rules.push(rule(5001, 100, vec![]));
        let c = Classifier::build(&rules, true);
        assert_eq!(c.shapes(Direction::Out), 4);
        assert_eq!(both(&rules, true, &pkt(v4(10, 0, 7, 1), 6, 1), Direction::Out), Some(14));
        assert_eq!(both(&rules, true, &pkt(v4(10, 7, 0, 2), 6, 1), Direction::Out), Some(15));
        let f = pkt(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9)), 6, 1);
        assert_eq!(both(&rules, true, &f, Direction::Out), Some(200));
        assert_eq!(both(&rules, true, &pkt(v4(9, 0, 0, 0), 6, 1), Direction::Out), Some(201));
    }

    #[test]
    fn ipv6_keys_longer_than_the_inline_words() {
        // Source and destination /128: four key words, one beyond the inline ones. Keys that
        // differ only in that last word must not be confused.
        let src = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
        let dst = |i: u16| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, i));
        let rules: Vec<Rule> = (0..2000u16)
            .map(|i| {
                rule(
                    u32::from(i),
                    0,
                    vec![
                        pred(Field::IpSrc, Matcher::Prefix(IpAddr::V6(src), 128)),
                        pred(Field::IpDst, Matcher::Exact(Value::Ip(dst(i)))),
                    ],
                )
            })
            .collect();
        let c = Classifier::build(&rules, false);
        assert_eq!(c.shapes(Direction::Out), 1);
        let mut f = pkt(dst(0), 6, 1);
        f.ip_src = Some(IpAddr::V6(src));
        for i in (0..2000u16).chain(3000..9000) {
            f.ip_dst = Some(dst(i));
            let want = (i < 2000).then_some(usize::from(i));
            assert_eq!(c.lookup(&f, Direction::In), want, "dst {i}");
        }
    }

    #[test]
    fn mac_and_ethertype_keys() {
        let mac = [2, 0, 0, 0, 0, 0x42];
        let rules = vec![
            rule(0, 0, vec![pred(Field::EthDst, Matcher::Exact(Value::Mac(mac)))]),
            rule(1, 1, vec![pred(Field::EtherType, Matcher::Exact(Value::Int(0x0806)))]),
        ];
        let mut f = pkt(v4(10, 0, 0, 1), 6, 80);
        assert_eq!(both(&rules, false, &f, Direction::Out), None);
        f.ethertype = 0x0806;
        assert_eq!(both(&rules, false, &f, Direction::Out), Some(1));
        f.eth_dst = mac;
        assert_eq!(both(&rules, false, &f, Direction::Out), Some(0));
        f.eth_src = mac;
        f.eth_dst = [0; 6];
        assert_eq!(both(&rules, false, &f, Direction::Out), Some(1));
    }

    // ---- property test: the classifier agrees with the linear scan ----

    const IPS: [IpAddr; 9] = [
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
        IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1)),
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 1)),
        IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x0001)),
    ];
    const MACS: [[u8; 6]; 3] = [[0; 6], [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
    const LENS: [u8; 14] = [0, 1, 8, 16, 23, 24, 31, 32, 33, 48, 64, 127, 128, 200];
    const BIG: [u64; 7] = [255, 256, 0x0800, 65535, 65536, u32::MAX as u64, u64::MAX];

    fn small_int() -> impl Strategy<Value = u64> {
        prop_oneof![8 => 0u64..6, 1 => prop::sample::select(&BIG[..])]
    }

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            3 => small_int().prop_map(Value::Int),
            3 => prop::sample::select(&IPS[..]).prop_map(Value::Ip),
            1 => prop::sample::select(&MACS[..]).prop_map(Value::Mac),
        ]
    }

    fn matcher() -> impl Strategy<Value = Matcher> {
        prop_oneof![
            4 => value().prop_map(Matcher::Exact),
            4 => (prop::sample::select(&IPS[..]), prop::sample::select(&LENS[..]))
                .prop_map(|(ip, len)| Matcher::Prefix(ip, len)),
            2 => (small_int(), small_int()).prop_map(|(a, b)| Matcher::Range(a.min(b), a.max(b))),
            1 => (small_int(), small_int()).prop_map(|(a, b)| Matcher::Range(a, b)),
            2 => prop::collection::vec(value(), 0..5).prop_map(Matcher::Set),
            1 => prop::collection::vec(value(), 15..25).prop_map(Matcher::Set),
        ]
    }

    fn predicate() -> impl Strategy<Value = Predicate> {
        (prop::sample::select(&Field::ALL[..]), matcher())
            .prop_map(|(field, matcher)| Predicate { field, matcher })
    }

    fn dir() -> impl Strategy<Value = Option<Direction>> {
        prop_oneof![2 => Just(None), 1 => Just(Some(Direction::Out)), 1 => Just(Some(Direction::In))]
    }

    fn any_rule() -> impl Strategy<Value = Rule> {
        let predicates = prop_oneof![
            1 => Just(Vec::new()),
            12 => prop::collection::vec(predicate(), 1..4),
        ];
        (0u32..6, 0u32..4, dir(), predicates).prop_map(|(id, priority, dir, predicates)| Rule {
            id,
            priority,
            dir,
            predicates,
            action: Action::Pass,
        })
    }

    fn opt_ip() -> impl Strategy<Value = Option<IpAddr>> {
        prop_oneof![1 => Just(None), 6 => prop::sample::select(&IPS[..]).prop_map(Some)]
    }

    fn small16() -> impl Strategy<Value = u16> {
        prop_oneof![8 => 0u16..6, 1 => Just(0x0800), 1 => Just(u16::MAX)]
    }

    fn fields() -> impl Strategy<Value = Fields> {
        (
            (prop::sample::select(&MACS[..]), prop::sample::select(&MACS[..]), small16()),
            (opt_ip(), opt_ip(), opt_ip(), opt_ip()),
            (prop_oneof![8 => 0u8..6, 1 => Just(255u8)], small16(), small16()),
            prop::option::of(prop_oneof![8 => 0u32..6, 1 => Just(u32::MAX)]),
        )
            .prop_map(
                |(
                    (eth_src, eth_dst, ethertype),
                    (ip_src, ip_dst, outer_src, outer_dst),
                    (proto, l4_src, l4_dst),
                    vni,
                )| {
                    Fields {
                        eth_src,
                        eth_dst,
                        ethertype,
                        ip_src,
                        ip_dst,
                        proto,
                        l4_src,
                        l4_dst,
                        vni,
                        outer_src,
                        outer_dst,
                    }
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn agrees_with_linear_scan(
            rules in prop::collection::vec(any_rule(), 0..30),
            packets in prop::collection::vec(fields(), 1..24),
        ) {
            for lpm in [false, true] {
                let c = Classifier::build(&rules, lpm);
                prop_assert_eq!(c.len(), rules.len());
                for f in &packets {
                    for d in [Direction::Out, Direction::In] {
                        prop_assert_eq!(c.lookup(f, d), linear_lookup(&rules, f, d, lpm));
                    }
                }
            }
        }

        /// Packets built to hit a rule: each packet copies the values a random rule asks for,
        /// so matches (and contests between rules) are frequent.
        #[test]
        fn agrees_on_packets_aimed_at_rules(
            rules in prop::collection::vec(any_rule(), 1..30),
            base in fields(),
            picks in prop::collection::vec(any::<prop::sample::Index>(), 1..16),
        ) {
            for pick in picks {
                let r = pick.get(&rules);
                let mut f = base;
                for p in &r.predicates {
                    aim(&mut f, p);
                }
                for lpm in [false, true] {
                    let c = Classifier::build(&rules, lpm);
                    for d in [Direction::Out, Direction::In] {
                        prop_assert_eq!(c.lookup(&f, d), linear_lookup(&rules, &f, d, lpm));
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Larger rule sets: long buckets, many shapes, early cut-offs.
        #[test]
        fn agrees_on_large_rule_sets(
            rules in prop::collection::vec(any_rule(), 100..300),
            base in fields(),
            picks in prop::collection::vec(any::<prop::sample::Index>(), 32..64),
        ) {
            let cs = [Classifier::build(&rules, false), Classifier::build(&rules, true)];
            for pick in picks {
                let mut f = base;
                for p in &pick.get(&rules).predicates {
                    aim(&mut f, p);
                }
                for (c, lpm) in cs.iter().zip([false, true]) {
                    for d in [Direction::Out, Direction::In] {
                        prop_assert_eq!(c.lookup(&f, d), linear_lookup(&rules, &f, d, lpm));
                    }
                }
            }
        }
    }

    /// Sets `f`'s field so that `p` is likely to match (when its value fits the field).
    fn aim(f: &mut Fields, p: &Predicate) {
        let v = match &p.matcher {
            Matcher::Exact(v) => *v,
            Matcher::Prefix(ip, _) => Value::Ip(*ip),
            Matcher::Range(lo, _) => Value::Int(*lo),
            Matcher::Set(vals) => match vals.first() {
                Some(v) => *v,
                None => return,
            },
        };
        match (p.field, v) {
            (Field::EthSrc, Value::Mac(m)) => f.eth_src = m,
            (Field::EthDst, Value::Mac(m)) => f.eth_dst = m,
            (Field::EtherType, Value::Int(n)) => f.ethertype = n as u16,
            (Field::IpSrc, Value::Ip(ip)) => f.ip_src = Some(ip),
            (Field::IpDst, Value::Ip(ip)) => f.ip_dst = Some(ip),
            (Field::IpProto, Value::Int(n)) => f.proto = n as u8,
            (Field::L4Src, Value::Int(n)) => f.l4_src = n as u16,
            (Field::L4Dst, Value::Int(n)) => f.l4_dst = n as u16,
            (Field::Vni, Value::Int(n)) => f.vni = Some(n as u32),
            (Field::OuterIpSrc, Value::Ip(ip)) => f.outer_src = Some(ip),
            (Field::OuterIpDst, Value::Ip(ip)) => f.outer_dst = Some(ip),
            _ => {}
        }
    }
}
