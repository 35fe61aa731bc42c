//! Turn-atomic trimming (DESIGN.md section 5): `trim_turns` and `trim_turn_count`.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Serialize;

use crate::estimate::Profile;
use crate::marks::{ATTACH, CONSONANT, LINKER, PREPEND};
use crate::model::{
    in_table, thinking_anchor, wordless, Format, Message, Part, PartKind, Role, BREADCRUMB,
    RESULTS_REMOVED, TOOL_RESULTS_PREFIX,
};
use crate::pairs::{is_white_space, part_eq, repair_resolved, Missing, PairChange, Work};
use crate::turns::{resolve, segment, segment_resolved, Resolution, Segmentation};

/// What happened to one input message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fate {
    /// Index in the input.
    pub index: usize,
    /// `kept`, `dropped`, `truncated` or `repaired`.
    pub fate: &'static str,
    /// The rule that decided it (`fits`, `preamble`, `kept_turn`, `oldest_turn`,
    /// `oldest_tool_unit`, `tool_result_shrunk`, `reply_shrunk`, `request_truncated`, `turn_limit`,
    /// `orphan_result`, `emptied_by_repair`, `result_moved`, `stub_inserted`,
    /// `call_removed`, `results_reordered`, `placeholder_inserted`, `breadcrumb_added`).
    pub rule: &'static str,
    /// Characters removed from the message's text (truncation only).
    #[serde(skip_serializing_if = "is_zero")]
    pub chars_removed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Report of a trim or repair (DESIGN.md section 5). Serializes to JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Estimated tokens of the input.
    pub tokens_before: u64,
    /// Estimated tokens of the output.
    pub tokens_after: u64,
    /// The token budget, when there was one.
    pub budget: Option<u64>,
    /// Whether the output is within the budget (always true without a budget).
    pub fits: bool,
    /// Why anything changed: `token_budget`, `turn_limit`, `tool_pairs`; `None` when
    /// the output is the input.
    pub reason: Option<&'static str>,
    /// Turns in the (repaired) input.
    pub turns_before: u64,
    /// Turns kept.
    pub kept_turns: u64,
    /// Whole turns dropped.
    pub dropped_turns: u64,
    /// Input messages dropped.
    pub dropped_messages: u64,
    /// Input messages whose text was shortened.
    pub truncated_messages: u64,
    /// Messages the library inserted (breadcrumb, synthetic tool results).
    pub inserted_messages: u64,
    /// Whether a breadcrumb was inserted.
    pub breadcrumb: bool,
    /// Every change made to tool pairs.
    pub repairs: Vec<PairChange>,
    /// The fate of every input message, in input order.
    pub fates: Vec<Fate>,
}

/// A trimmed conversation and its report.
#[derive(Debug)]
pub struct Outcome<'a> {
    pub messages: Vec<Work<'a>>,
    pub report: Report,
}

/// Options shared by the trimming functions.
#[derive(Debug, Clone, Copy)]
pub struct TrimOptions<'p> {
    pub profile: &'p Profile,
    pub breadcrumb: bool,
    pub format: Format,
}

/// A tool result's text parts cut to one keep ([`State::shrink_evenly`]): their tokens
/// after the cut, each cut part's new text (by its index among the parts cut), and the
/// characters removed.
type PartCuts = (u64, Vec<(usize, String)>, usize);

/// Marker put where text was cut out.
pub fn marker(removed: usize) -> String {
    format!("\n[... {removed} characters removed ...]\n")
}

/// The marker of a cut that removes `removed` characters; with `end` (the cut text ends
/// an Anthropic prefill, see [`State::ends_prefill`]) and nothing kept after the cut, without
/// its final newline: the Messages API refuses a final assistant message that ends in
/// whitespace (fresh16b #2).
fn cut_marker(removed: u64, end: bool, tail_empty: bool) -> String {
    let m = format!("\n[... {removed} characters removed ...]\n");
    if end && tail_empty {
        m[..m.len() - 1].to_owned()
    } else {
        m
    }
}

fn is_regional(c: char) -> bool {
    matches!(c as u32, 0x1F1E6..=0x1F1FF)
}

/// Hangul jamo and syllables that form one grapheme (UAX #29 rules GB6-GB8).
fn hangul_joins(a: char, b: char) -> bool {
    let kind = |c: char| -> u8 {
        match c as u32 {
            0x1100..=0x115F | 0xA960..=0xA97C => b'L',
            0x1160..=0x11A7 | 0xD7B0..=0xD7C6 => b'V',
            0x11A8..=0x11FF | 0xD7CB..=0xD7FB => b'T',
            u @ 0xAC00..=0xD7A3 if (u - 0xAC00) % 28 == 0 => b'v', // LV
            0xAC00..=0xD7A3 => b't',                               // LVT
            _ => 0,
        }
    };
    matches!(
        (kind(a), kind(b)),
        (b'L', b'L' | b'V' | b'v' | b't') | (b'v' | b'V', b'V' | b'T') | (b't' | b'T', b'T')
    )
}

/// A text addressed by character (code point) index, as cuts count characters: the byte
/// offset of each character, none kept for ASCII text (where the two are equal). Cuts
/// then copy byte slices of the text rather than characters one at a time (fresh26 #2:
/// a 4 MB tool result was collected into a `Vec<char>` and rebuilt character by
/// character at every trial cut).
pub(crate) struct CharText<'t> {
    text: &'t str,
    offsets: Option<Vec<usize>>,
    /// The cut markers the text already holds ([`find_markers`]), as character ranges
    /// with the count each names, in order.
    markers: Vec<(usize, usize, u64)>,
}

impl<'t> CharText<'t> {
    pub(crate) fn new(text: &'t str) -> Self {
        let offsets: Option<Vec<usize>> =
            (!text.is_ascii()).then(|| text.char_indices().map(|(b, _)| b).collect());
        let char_at = |b: usize| match &offsets {
            None => b,
            Some(o) => o.partition_point(|&x| x < b),
        };
        let markers = find_markers(text)
            .into_iter()
            .map(|(a, b, n)| (char_at(a), char_at(b), n))
            .collect();
        CharText {
            text,
            offsets,
            markers,
        }
    }

    /// Characters in the text.
    pub(crate) fn len(&self) -> usize {
        self.offsets.as_ref().map_or(self.text.len(), Vec::len)
    }

    /// The byte offset of character `i` (the text's length in bytes for `i >= len`).
    fn byte(&self, i: usize) -> usize {
        match &self.offsets {
            None => i.min(self.text.len()),
            Some(o) => o.get(i).copied().unwrap_or(self.text.len()),
        }
    }

    /// Character `i` (`i < len`).
    fn at(&self, i: usize) -> char {
        self.text[self.byte(i)..].chars().next().unwrap_or('\0')
    }

    /// Characters `a..b` as a slice of the text.
    fn slice(&self, a: usize, b: usize) -> &'t str {
        &self.text[self.byte(a)..self.byte(b)]
    }
}

/// The cut markers this library writes that `text` holds, as byte ranges with the
/// count of characters each names: `[... N characters removed ...]` (trimming's, inside
/// its line breaks) and `[... N characters (L lines) removed ...]` (`(1 line)`; the
/// compaction functions'), `N` and `L` of 1 to 18 ASCII digits; leftmost first, none
/// overlapping (`_reference._MARKER_RE`). A cut that meets one takes it whole and adds
/// its count to its own (fresh27 #1: the guard cut a cut log again and its marker said
/// 144 characters where 1,062,849 were gone, or kept pieces of the first marker).
fn find_markers(text: &str) -> Vec<(usize, usize, u64)> {
    fn digits(b: &[u8], i: usize) -> Option<(u64, usize)> {
        let n = b[i.min(b.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if n == 0 || n > 18 {
            return None;
        }
        let v = b[i..i + n]
            .iter()
            .fold(0u64, |v, c| v * 10 + u64::from(c - b'0'));
        Some((v, i + n))
    }
    fn lit(b: &[u8], i: usize, s: &[u8]) -> Option<usize> {
        b.get(i..i + s.len())
            .filter(|x| *x == s)
            .map(|_| i + s.len())
    }
    fn parse(b: &[u8], at: usize) -> Option<(usize, u64)> {
        let (n, i) = digits(b, lit(b, at, b"[... ")?)?;
        let i = lit(b, i, b" characters")?;
        let lines = lit(b, i, b" (")
            .and_then(|j| digits(b, j))
            .and_then(|(_, j)| lit(b, j, b" line"))
            .map(|j| lit(b, j, b"s").unwrap_or(j))
            .and_then(|j| lit(b, j, b")"));
        let end = lines
            .and_then(|j| lit(b, j, b" removed ...]"))
            .or_else(|| lit(b, i, b" removed ...]"))?;
        Some((end, n))
    }
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    for (at, _) in text.match_indices("[... ") {
        if at < from {
            continue;
        }
        if let Some((end, n)) = parse(b, at) {
            out.push((at, end, n));
            from = end;
        }
    }
    out
}

/// Code points of one grapheme cluster after which a cut may fall inside it: UAX #15's
/// stream-safe limit (a base and 30 non-starters), for any cluster. A text of one base
/// and 100,000 combining marks, or a chain of ZWJ emoji, was one grapheme no cut could
/// enter, so no trim could make it fit.
const MAX_CLUSTER: usize = 31;

/// A cut between `chars[p-1]` and `chars[p]` would split a grapheme (UAX #29, with the
/// tables of `tools/gen_unicode_tables.py`; [`splits_cluster`]) whose first
/// [`MAX_CLUSTER`] code points do not all precede `p`.
fn bad_cut(chars: &CharText<'_>, p: usize) -> bool {
    splits_cluster(chars, p)
        && !(p >= MAX_CLUSTER && (1..MAX_CLUSTER).all(|k| splits_cluster(chars, p - k)))
}

/// A cut between `chars[p-1]` and `chars[p]` would split a grapheme (UAX #29): before an
/// extending or spacing mark or a joiner, after a prepend character or a ZWJ, inside
/// `\r\n`, inside Hangul syllable jamo, between an Indic linker and a consonant, or
/// inside a flag.
fn splits_cluster(chars: &CharText<'_>, p: usize) -> bool {
    if p == 0 || p >= chars.len() {
        return false;
    }
    let (a, b) = (chars.at(p - 1), chars.at(p));
    if in_table(ATTACH, b)
        || a == '\u{200D}'
        || in_table(PREPEND, a)
        || (a == '\r' && b == '\n')
        || hangul_joins(a, b)
        || (in_table(LINKER, a) && in_table(CONSONANT, b))
    {
        return true;
    }
    if is_regional(b) && is_regional(a) {
        let run = chars.text[..chars.byte(p)]
            .chars()
            .rev()
            .take_while(|&c| is_regional(c))
            .count();
        return run % 2 == 1;
    }
    false
}

/// Keep about `keep` characters of `text`: the first half and the last half, with a
/// marker naming how many characters were removed between them. Cuts fall on code
/// point boundaries and never inside a grapheme (see `bad_cut`).
/// Returns the new text and the number of characters removed (0 when `keep` >= length).
///
/// ```
/// use contextwindow_core::trim::shrink_text;
/// let (t, removed) = shrink_text("abcdefghij", 4);
/// assert_eq!(removed, 6);
/// assert_eq!(t, "ab\n[... 6 characters removed ...]\nij");
/// ```
pub fn shrink_text(text: &str, keep: usize) -> (String, usize) {
    shrink_chars(&CharText::new(text), 0, keep, false)
}

/// Where [`shrink_chars`] cuts to keep about `keep` of `chars` after their first `floor`
/// characters, which always stay (0, or the `[Tool results]` prefix of an observation):
/// the end of the head and the start of the tail (equal, nothing removed, when
/// `floor + keep >= chars.len()`). The head never ends before `floor`: a cut right there
/// that would split a grapheme moves forward instead (never with `floor` 0, the start
/// of the text), and when the head then reaches the tail, nothing is removed.
fn cut_points(chars: &CharText<'_>, floor: usize, keep: usize) -> (usize, usize) {
    let n = chars.len();
    if floor + keep >= n {
        return (n, n);
    }
    let mut head = floor + keep.div_ceil(2);
    while head > floor && bad_cut(chars, head) {
        head -= 1;
    }
    while head < n && bad_cut(chars, head) {
        head += 1;
    }
    let mut tail_start = n - keep / 2;
    while tail_start < n && bad_cut(chars, tail_start) {
        tail_start += 1;
    }
    if head >= tail_start {
        return (n, n);
    }
    // a marker the text holds is never split: the cut takes it whole (the head then ends
    // where it starts, unless that is before `floor` or would split a grapheme: then the
    // head keeps it), and its count is added to the new marker's (`shown_removed`)
    for &(a, b, _) in &chars.markers {
        if a < head && head < b {
            head = if a >= floor && !bad_cut(chars, a) {
                a
            } else {
                b
            };
            while head < n && bad_cut(chars, head) {
                head += 1;
            }
        }
        if a < tail_start && tail_start < b {
            tail_start = b;
            while tail_start < n && bad_cut(chars, tail_start) {
                tail_start += 1;
            }
        }
    }
    if head >= tail_start {
        return (n, n);
    }
    (head, tail_start)
}

/// The count the marker of a cut removing `chars[head..tail_start]` names: the
/// characters removed, each marker among them counted as the characters it names
/// rather than its own.
fn shown_removed(chars: &CharText<'_>, head: usize, tail_start: usize) -> u64 {
    let mut shown = (tail_start - head) as u64;
    for &(a, b, n) in &chars.markers {
        if head <= a && b <= tail_start {
            shown = (shown - (b - a) as u64).saturating_add(n);
        }
    }
    shown
}

/// The largest `k` in `[0, n - 1]` with `ok(k)`, by binary search; 0 when `ok(0)` is
/// false (a text is then cut to its marker alone): the search for a cut both fitting and
/// worth its marker. `_reference.largest_fitting`.
fn largest_fitting(n: usize, ok: impl Fn(usize) -> bool) -> usize {
    let mut lo = 0usize;
    if ok(0) {
        let mut hi = n.saturating_sub(1);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if ok(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
    }
    lo
}

/// Texts of at least this many characters are cut after a search by interpolation
/// ([`largest_within`]); shorter ones after a binary search. `_reference.INTERPOLATE_FROM`.
const INTERPOLATE_FROM: usize = 65_536;

/// The largest `k` in `[0, n - 1]` with `cost(k) <= limit`, 0 when `cost(0)` is over
/// (a text is then cut to its marker alone); `top`: the cost at `n` (the text whole),
/// over `limit`. Regula falsi with the Illinois step on `2 cost(k) - 2 limit - 1` (never
/// 0) while the bracket is over 64 wide, at most 12 steps, then a binary search inside
/// it: a trial cut's cost grows about linearly in the characters kept, so its first
/// guesses land near the answer and the trials, each estimating the text it keeps, cost
/// a few estimates of what is kept, where a binary search from the middle of the whole
/// text paid about `log2(n)` of them (fresh26 #2: 7 MB/s cutting one 1 MB result to half).
/// A cut's cost is not monotone in the characters kept (README Known limits), so like a
/// binary search it finds a `k` that fits next to one that does not, not always the
/// largest. Below [`INTERPOLATE_FROM`] characters, where a binary search costs little,
/// it is one (the cuts the tests and the README check by hand). `_reference.largest_within`.
fn largest_within(n: usize, cost: impl Fn(usize) -> u64, limit: u64, top: u64) -> usize {
    if n < INTERPOLATE_FROM {
        return largest_fitting(n, |k| cost(k) <= limit);
    }
    let c0 = cost(0);
    if c0 > limit || n <= 1 {
        return 0;
    }
    let f = |c: u64| 2 * i128::from(c) - 2 * i128::from(limit) - 1;
    let (mut lo, mut f_lo) = (0usize, f(c0));
    let (mut hi, mut f_hi) = (n, f(top.max(limit + 1)));
    let mut side = 0i8; // -1: lo moved last, 1: hi moved last
    let mut steps = 0;
    while hi - lo > 64 && steps < 12 {
        steps += 1;
        let width = (hi - lo) as i128;
        let k = lo as i128 + (-f_lo) * width / (f_hi - f_lo);
        let k = (k as usize).clamp(lo + 1, hi - 1);
        let fk = f(cost(k));
        if fk < 0 {
            (lo, f_lo) = (k, fk);
            if side == -1 {
                f_hi = (f_hi / 2).max(1);
            }
            side = -1;
        } else {
            (hi, f_hi) = (k, fk);
            if side == 1 {
                f_lo = (f_lo / 2).min(-1);
            }
            side = 1;
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if cost(mid) <= limit {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// [`cut_points`], and for a cut that ends an Anthropic prefill (`end`) a tail of
/// whitespace only goes with the cut: the marker then ends the text without its final
/// newline ([`cut_marker`]), so the cut never ends in whitespace (fresh30 #3: a prefill of
/// `"\r\n" * 200` kept `"\r\n\r\n"` after the marker). `_reference.prefill_cut_points`.
fn prefill_cut_points(
    chars: &CharText<'_>,
    floor: usize,
    keep: usize,
    end: bool,
) -> (usize, usize) {
    let (head, tail_start) = cut_points(chars, floor, keep);
    let n = chars.len();
    if end
        && head < tail_start
        && tail_start < n
        && chars.slice(tail_start, n).chars().all(is_white_space)
    {
        (head, n)
    } else {
        (head, tail_start)
    }
}

/// [`shrink_text`] on `chars`, keeping their first `floor` characters (see [`cut_points`]);
/// `end`: the text ends an Anthropic prefill (see [`cut_marker`], [`prefill_cut_points`]).
fn shrink_chars(chars: &CharText<'_>, floor: usize, keep: usize, end: bool) -> (String, usize) {
    let (head, tail_start) = prefill_cut_points(chars, floor, keep, end);
    if head == tail_start {
        return (chars.text.to_owned(), 0);
    }
    let removed = tail_start - head;
    let mark = cut_marker(
        shown_removed(chars, head, tail_start),
        end,
        tail_start == chars.len(),
    );
    let (h, t) = (chars.slice(0, head), chars.slice(tail_start, chars.len()));
    let mut out = String::with_capacity(h.len() + mark.len() + t.len());
    out.push_str(h);
    out.push_str(&mark);
    out.push_str(t);
    (out, removed)
}

/// A work item's message, cost, the total and the item's fate ([`State::snapshot`]).
type Snapshot<'a> = (Cow<'a, Message>, u64, u64, Option<Fate>);

/// A cut of a tool result's text parts across them ([`span_plan`]): the parts kept
/// at the head and at the tail, the marker, the parts' tokens after it and the
/// characters removed.
type SpanPlan = (usize, usize, String, u64, usize);

/// The cut across the text parts of a tool result (`olds`: each part's tokens; `spans`:
/// its characters and the count a marker of all of it names, [`shown_removed`]): the
/// first and last parts whole, the ones between them gone behind one marker in the first
/// of their places, naming the characters they held. Keeps the most parts with which
/// the parts' tokens fit `room`, the head one more than the tail when odd, or the most
/// from the tail alone or the head alone where that keeps more than twice as many; one
/// marker alone when none fit. Taken where cuts inside each part cannot fit, or keep fewer
/// characters (`State::shrink_evenly`; fresh55 #1, fresh56 #1). `_reference._span_plan`.
fn span_plan(p: &Profile, olds: &[u64], spans: &[(usize, u64)], room: u64) -> SpanPlan {
    let n = olds.len();
    let mut pre = vec![0u64; n + 1];
    let mut shown_pre = vec![0u64; n + 1];
    let mut chars_pre = vec![0usize; n + 1];
    for i in 0..n {
        pre[i + 1] = pre[i] + olds[i];
        shown_pre[i + 1] = shown_pre[i] + spans[i].1;
        chars_pre[i + 1] = chars_pre[i] + spans[i].0;
    }
    // with `h` parts kept at the head and `t` at the tail: the marker and the tokens
    let plan = |h: usize, t: usize| {
        let mark = cut_marker(shown_pre[n - t] - shown_pre[h], false, false);
        let tokens = pre[h] + (pre[n] - pre[n - t]) + p.text_tokens(&mark);
        (h, t, mark, tokens, chars_pre[n - t] - chars_pre[h])
    };
    // the most parts kept from both ends, or from the tail alone or the head alone where
    // that keeps more than twice as many (a first part too large to keep whole kept
    // nothing of the others: fresh57 #2; a few more short lines are not worth the end)
    let splits: [fn(usize) -> (usize, usize); 3] = [|k| (k - k / 2, k / 2), |k| (0, k), |k| (k, 0)];
    let mut best: Option<SpanPlan> = None;
    for split in splits {
        let k = largest_fitting(n, |k| {
            let (h, t) = split(k);
            plan(h, t).3 <= room
        });
        let (h, t) = split(k);
        let candidate = plan(h, t);
        if best
            .as_ref()
            .is_none_or(|b| candidate.0 + candidate.1 > 2 * (b.0 + b.1))
        {
            best = Some(candidate);
        }
    }
    best.unwrap_or_else(|| plan(0, 0))
}

fn fate(index: usize, fate: &'static str, rule: &'static str) -> Fate {
    Fate {
        index,
        fate,
        rule,
        chars_removed: 0,
    }
}

struct State<'a, 'p> {
    opts: TrimOptions<'p>,
    input: &'a [Message],
    input_len: usize,
    tokens_before: u64,
    work: Vec<Work<'a>>,
    costs: Vec<u64>,
    keep: Vec<bool>,
    /// Sum of `costs` over kept items.
    total: u64,
    fates: Vec<Fate>,
    repairs: Vec<PairChange>,
    /// Work items that are real user messages holding stubs for the calls of the item
    /// before them (an Anthropic call the user interrupted; see `turns.rs`).
    stub_head: Vec<bool>,
    /// For such an item while its caller is dropped: the item with its stubs and its cost.
    /// Keyed by item: few are ever saved, and a list of one slot per item (320 bytes each:
    /// 1.1 MB for the 3,400 messages of the gateway bench) was made for every trim.
    saved: HashMap<usize, (Work<'a>, u64)>,
    /// The resolution of the input's tool results, while it is the work list's too: repair
    /// left every message in place (taken by the first [`State::segment`]).
    resolution: Option<Resolution>,
    /// The work list's segmentation when [`State::new`] needed it already (costs of the
    /// kept turns only: [`Costs::KeptOnly`]); taken by the first [`State::segment`].
    segmented: Option<Segmentation>,
    /// The breadcrumb text's tokens, estimated once: [`State::breadcrumb_cost`] is asked
    /// for every number of turns the search tries (a 1,000-message trim asked about 900
    /// times, 2% of its instructions).
    crumb_text: std::cell::OnceCell<u64>,
}

/// Which work items [`State::new`] estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Costs {
    /// Every item, and every input message for the report's `tokens_before`.
    All,
    /// Only what a trim to this budget can keep: the preamble, the turns that cannot be
    /// dropped, and the droppable turns from the newest back to the first that cannot
    /// fit (see [`kept_only_costs`]). The report's `tokens_before` is then not computed.
    KeptOnly(u64),
}

/// The fate rule of a message that repair changed only by giving it results (`msg`, the
/// repaired `input`): `result_moved` when it received a result moved out of another
/// message (even if it received stubs too), else `stub_inserted` when it received stubs;
/// `None` when it received neither. Counted by kind: such a message lost no result.
fn received_rule(input: &Message, msg: &Message) -> Option<&'static str> {
    let count = |m: &Message, stub: bool| {
        m.content
            .iter()
            .filter(|p| p.kind == PartKind::ToolResult && p.is_missing_result() == stub)
            .count()
    };
    if count(msg, false) > count(input, false) {
        Some("result_moved")
    } else if count(msg, true) > count(input, true) {
        Some("stub_inserted")
    } else {
        None
    }
}

/// A text-action agent's observation as `fit` reads one: a user message whose first
/// part is text starting with [`TOOL_RESULTS_PREFIX`] (`_reference.is_results_text`).
fn is_results_text(m: &Message) -> bool {
    m.role == Role::User
        && m.content.first().is_some_and(|p| {
            p.kind == PartKind::Text && p.text_str().starts_with(TOOL_RESULTS_PREFIX)
        })
}

/// The text-action steps of work items `range` (one turn), in order
/// (`_reference.text_action_steps`): an assistant message in no tool unit and no
/// placeholder, the observations right after it ([`is_results_text`], in no unit, no
/// placeholder) and the screenshots after those (user messages of media alone:
/// [`crate::turns::after_observations`]). `fit` evicts and `trim_turns` drops each whole,
/// as a tool unit (fresh52 #1: a one-turn text-action session, as the README's `[Tool
/// results]` prefix makes it, lost no step: every command and observation was cut to its
/// marker, `fits=False` at 2,121 tokens for 1,000, where `fit` fit).
fn text_action_steps(
    work: &[Work<'_>],
    seg: &Segmentation,
    range: std::ops::Range<usize>,
) -> Vec<Vec<usize>> {
    let mut in_unit = vec![false; work.len()];
    for &w in seg.units.iter().flatten() {
        in_unit[w] = true;
    }
    let placeholder = |m: &Message| {
        m.content.len() == 1
            && m.content[0].kind == PartKind::Text
            && m.content[0].text_str() == RESULTS_REMOVED
    };
    let mut steps = Vec::new();
    let mut w = range.start;
    while w + 1 < range.end {
        let m = &work[w].msg;
        if m.role != Role::Assistant || in_unit[w] || placeholder(m) {
            w += 1;
            continue;
        }
        let mut e = w + 1;
        while e < range.end
            && !in_unit[e]
            && !placeholder(&work[e].msg)
            && (is_results_text(&work[e].msg) || (e > w + 1 && work[e].msg.is_media_only()))
        {
            e += 1;
        }
        if e > w + 1 {
            steps.push((w..e).collect());
        }
        w = e.max(w + 1);
    }
    steps
}

/// The newest turn's (`last`) tool units and text-action steps ([`text_action_steps`]),
/// in order: dropped oldest first.
fn newest_turn_units(
    work: &[Work<'_>],
    seg: &Segmentation,
    last: std::ops::Range<usize>,
) -> Vec<Vec<usize>> {
    let mut units: Vec<Vec<usize>> = seg
        .units
        .iter()
        .filter(|u| last.contains(&u[0]))
        .cloned()
        .collect();
    units.extend(text_action_steps(work, seg, last));
    units.sort_by_key(|u| u[0]);
    units
}

/// Work items whose stubs answer the calls of the item right before them: real user
/// messages holding results (only stubs can make a real user message hold results).
fn stub_heads(work: &[Work<'_>]) -> Vec<bool> {
    (0..work.len())
        .map(|w| {
            w > 0
                && work[w - 1].msg.role == Role::Assistant
                && work[w].msg.is_real_user()
                && work[w].msg.has_tool_results()
        })
        .collect()
}

/// Tokens of the stubs of work item `h` when it is a stub head (`stub_head`), else 0.
fn stub_tokens(work: &[Work<'_>], stub_head: &[bool], p: &Profile, h: usize) -> u64 {
    if !stub_head.get(h).copied().unwrap_or(false) {
        return 0;
    }
    work[h]
        .msg
        .content
        .iter()
        .filter(|q| q.is_missing_result())
        .map(|q| p.part_tokens(q))
        .sum()
}

/// Whether message `m` holds nothing a breadcrumb could go before: no content, or only
/// text parts that are empty or whitespace ([`crate::pairs::is_white_space`]; `""` is one
/// empty text part), which the Messages API refuses as it refuses `[]` (fresh41 #5: the
/// breadcrumb went in beside an empty text block, which stayed).
fn holds_nothing(m: &Message) -> bool {
    m.content
        .iter()
        .all(|p| p.kind == PartKind::Text && p.text_str().chars().all(crate::pairs::is_white_space))
}

/// Whether the work items `r` (a turn) hold a pinned message.
fn holds_pinned(work: &[Work<'_>], r: &std::ops::Range<usize>) -> bool {
    r.clone().any(|w| work[w].msg.pinned)
}

/// The turns a trim may drop, oldest first: never the newest, never one holding a pinned
/// message, never one opened by stubs answering the calls of a turn that stays (the stubs
/// go with those calls). Costs play no part.
fn droppable_turns(work: &[Work<'_>], seg: &Segmentation, stub_head: &[bool]) -> Vec<usize> {
    let t = seg.turns.len();
    let mut can_go = vec![false; t];
    for i in 0..t.saturating_sub(1) {
        let after_kept = i > 0 && stub_head[seg.turns[i].start] && !can_go[i - 1];
        can_go[i] = !holds_pinned(work, &seg.turns[i]) && !after_kept;
    }
    (0..t.saturating_sub(1)).filter(|&i| can_go[i]).collect()
}

/// Costs of the work items for a trim to `budget` that will not report `tokens_before`
/// ([`Costs::KeptOnly`]): every item is estimated except those of the droppable turns
/// older than the newest droppable turn `J` at which the preamble, the turns that cannot
/// be dropped but the newest, and the droppable turns from `J` on, each less its stubs,
/// already exceed `budget`, and together exceed the largest breadcrumb. Those older items
/// get `budget + 1` plus their stubs' tokens instead.
///
/// Why the trim is the same: keeping any turn older than `J` keeps the turns from `J` on
/// too (turns go oldest first, and come back newest first once the newest turn has lost
/// tool units, which is why that turn, whatever it keeps, counts nothing here), and the
/// kept turns cost at least their costs less their
/// stubs, so that trim is over budget with the real costs and with these; once those
/// turns are gone the placeholder costs have left the running total exactly as the real
/// ones would. Dropping every droppable turn removes more than a breadcrumb costs either
/// way, so the "drop them only if that shrinks the conversation" rule agrees too. Each
/// placeholder is at least its stubs' tokens, so no subtraction goes below zero.
fn kept_only_costs(
    work: &[Work<'_>],
    seg: &Segmentation,
    stub_head: &[bool],
    opts: TrimOptions<'_>,
    budget: u64,
) -> Vec<u64> {
    let p = opts.profile;
    let droppable = droppable_turns(work, seg, stub_head);
    let mut in_droppable = vec![false; work.len()];
    for &i in &droppable {
        for w in seg.turns[i].clone() {
            in_droppable[w] = true;
        }
    }
    let mut costs = vec![0u64; work.len()];
    let net = |costs: &[u64], r: &std::ops::Range<usize>| -> u64 {
        let c: u64 = costs[r.clone()].iter().sum();
        c.saturating_sub(stub_tokens(work, stub_head, p, r.start))
    };
    // The preamble and every turn that cannot be dropped.
    for (w, c) in costs.iter_mut().enumerate() {
        if !in_droppable[w] {
            *c = p.message_tokens(&work[w].msg);
        }
    }
    let mut kept: u64 = costs[..seg.preamble_end].iter().sum();
    let newest = seg.turns.len().saturating_sub(1);
    for (i, r) in seg.turns.iter().enumerate() {
        if i != newest && droppable.binary_search(&i).is_err() {
            kept = kept.saturating_add(net(&costs, r));
        }
    }
    let crumb = p.message_overhead + p.text_tokens(BREADCRUMB);
    let mut dropped_net: u64 = 0;
    for (j, &i) in droppable.iter().enumerate().rev() {
        let r = &seg.turns[i];
        for w in r.clone() {
            costs[w] = p.message_tokens(&work[w].msg);
        }
        let n = net(&costs, r);
        kept = kept.saturating_add(n);
        dropped_net = dropped_net.saturating_add(n);
        if kept > budget && dropped_net > crumb {
            for &older in &droppable[..j] {
                for w in seg.turns[older].clone() {
                    costs[w] = budget
                        .saturating_add(1)
                        .saturating_add(stub_tokens(work, stub_head, p, w));
                }
            }
            break;
        }
    }
    costs
}

impl<'a, 'p> State<'a, 'p> {
    fn new(messages: &'a [Message], opts: TrimOptions<'p>, missing: Missing, which: Costs) -> Self {
        let p = opts.profile;
        let res = resolve(messages);
        let (work, repairs) = repair_resolved(messages, &res, opts.format, missing);
        // repair left the list as it was: each item is the input message at its index
        let in_place = work.len() == messages.len()
            && work.iter().enumerate().all(|(i, w)| {
                w.src == Some(i)
                    && matches!(&w.msg, Cow::Borrowed(m) if std::ptr::eq(*m, &messages[i]))
            });
        let stub_head = stub_heads(&work);
        let mut resolution = in_place.then_some(res);
        let mut segmented = None;
        let (tokens_before, costs) = match which {
            Costs::All => {
                // Each message is estimated once: a work item that is an input message
                // itself (borrowed, unchanged) reuses that message's cost.
                let input_costs: Vec<u64> = messages.iter().map(|m| p.message_tokens(m)).collect();
                let costs: Vec<u64> = work
                    .iter()
                    .map(|w| match (&w.msg, w.src) {
                        (Cow::Borrowed(m), Some(i))
                            if messages.get(i).is_some_and(|x| std::ptr::eq(x, *m)) =>
                        {
                            input_costs[i]
                        }
                        _ => p.message_tokens(&w.msg),
                    })
                    .collect();
                (input_costs.iter().sum(), costs)
            }
            Costs::KeptOnly(budget) => {
                let seg = match resolution.take() {
                    Some(res) => segment_resolved(&work, &res),
                    None => segment(&work),
                };
                let costs = kept_only_costs(&work, &seg, &stub_head, opts, budget);
                segmented = Some(seg);
                (0, costs)
            }
        };
        let mut fates: Vec<Fate> = (0..messages.len())
            .map(|i| fate(i, "kept", "fits"))
            .collect();
        for c in &repairs {
            let f = &mut fates[c.index];
            match c.kind {
                // the message stays unless it is gone from the list (see below)
                "orphan_result_dropped" => *f = fate(c.index, "repaired", "orphan_result"),
                "message_dropped" => *f = fate(c.index, "dropped", "emptied_by_repair"),
                "result_moved" if f.fate == "kept" => {
                    *f = fate(c.index, "repaired", "result_moved")
                }
                "call_removed" => *f = fate(c.index, "repaired", "call_removed"),
                "stub_inserted" if f.fate == "kept" => {
                    *f = fate(c.index, "repaired", "stub_inserted")
                }
                "results_reordered" if f.fate == "kept" => {
                    *f = fate(c.index, "repaired", "results_reordered")
                }
                "placeholder_inserted" if f.fate == "kept" => {
                    *f = fate(c.index, "repaired", "placeholder_inserted")
                }
                _ => {}
            }
        }
        // An OpenAI tool message holding only orphan results goes whole.
        let mut present = vec![false; messages.len()];
        for i in work.iter().filter_map(|w| w.src) {
            present[i] = true;
        }
        for (i, f) in fates.iter_mut().enumerate() {
            if f.rule == "orphan_result" && !present[i] {
                f.fate = "dropped";
            }
        }
        let keep = vec![true; work.len()];
        let total = costs.iter().sum();
        // A message that received stubs or moved results (Anthropic: the user message
        // after the call, a carrier of results too) was changed, though the repair changes
        // name the call's message and the result's old message (fresh8 N8, fates16).
        for w in &work {
            if let (Some(i), Cow::Owned(m)) = (w.src, &w.msg) {
                if fates[i].fate == "kept" {
                    if let Some(rule) = received_rule(&messages[i], m) {
                        fates[i] = fate(i, "repaired", rule);
                    }
                }
            }
        }
        let saved = HashMap::new();
        State {
            opts,
            input: messages,
            input_len: messages.len(),
            tokens_before,
            work,
            costs,
            keep,
            total,
            fates,
            repairs,
            stub_head,
            saved,
            resolution,
            segmented,
            crumb_text: std::cell::OnceCell::new(),
        }
    }

    /// The turns and tool units of the work list, as [`segment`] finds them; with the
    /// input's resolution when it is the work list's (see `resolution`), so the tool
    /// results are not resolved twice. Called before the work list changes.
    fn segment(&mut self) -> Segmentation {
        if let Some(seg) = self.segmented.take() {
            return seg;
        }
        match self.resolution.take() {
            Some(res) => segment_resolved(&self.work, &res),
            None => segment(&self.work),
        }
    }

    fn total(&self) -> u64 {
        self.total
    }

    /// Keep or drop work item `w`, keeping the running total. The stubs of the next item
    /// answer `w`'s calls: they go and come back with `w`.
    fn set_keep(&mut self, w: usize, keep: bool) {
        if self.keep[w] != keep {
            self.keep[w] = keep;
            if keep {
                self.total += self.costs[w];
            } else {
                self.total -= self.costs[w];
            }
            if self.stub_head.get(w + 1) == Some(&true) {
                self.set_stubs(w + 1, keep);
            }
        }
    }

    /// Take out (`with` false) or put back the stubs of stub head `h`. Taken out, a
    /// message equal to its input message is that message again. Put back, the item is
    /// the one saved (nothing shortens a message before its caller can come back).
    fn set_stubs(&mut self, h: usize, with: bool) {
        let (item, cost) = if with {
            let Some(x) = self.saved.remove(&h) else {
                return;
            };
            x
        } else {
            let Some(mut bare) = self.work[h].msg.without_stubs() else {
                return;
            };
            let input = self.input;
            let src = self.work[h].src;
            let original = src.map(|i| &input[i]).filter(|m| {
                m.content.len() == bare.content.len()
                    && m.content
                        .iter()
                        .zip(&bare.content)
                        .all(|(x, y)| part_eq(x, y))
            });
            let msg = match original {
                Some(m) => Cow::Borrowed(m),
                None => {
                    bare.fix_content_kind();
                    Cow::Owned(bare)
                }
            };
            let cost = self.costs[h] - self.stub_tokens(h); // additive over parts
            (Work { src, msg }, cost)
        };
        if self.keep[h] {
            self.total = self.total - self.costs[h] + cost;
        }
        let old = std::mem::replace(&mut self.work[h], item);
        let old_cost = std::mem::replace(&mut self.costs[h], cost);
        if !with {
            self.saved.insert(h, (old, old_cost));
        }
        // its fate follows: changed while it holds the stubs, the input message again
        // (kept) when taking them out was all repair changed
        if let Some(i) = self.work[h].src {
            let owned = matches!(self.work[h].msg, Cow::Owned(_));
            let f = &mut self.fates[i];
            let rule = received_rule(&self.input[i], &self.work[h].msg);
            if let (true, true, "kept", Some(rule)) = (with, owned, f.fate, rule) {
                *f = fate(i, "repaired", rule);
            } else if !with && !owned && f.fate == "repaired" && f.rule == "stub_inserted" {
                *f = fate(i, "kept", "fits");
            }
        }
    }

    /// Set the fate of work item `w`'s input message. Keeping a message does not hide
    /// that repair changed it: a `repaired` fate stays when the message is kept.
    fn set_fate(&mut self, w: usize, fate_: &'static str, rule: &'static str) {
        if let Some(i) = self.work[w].src {
            let f = &mut self.fates[i];
            if fate_ == "kept" && f.fate == "repaired" {
                return;
            }
            f.fate = fate_;
            f.rule = rule;
        }
    }

    /// Drop the turns of `seg` listed in `turns` (fate rule `rule`) and mark every other
    /// turn's messages kept: `pinned_turn` for a turn `held(i)` names (kept for the
    /// pinned message it holds where it would have gone without it), `kept_turn` for
    /// the others.
    ///
    /// Returns, for each dropped turn in the order of `turns`, the fates its messages had
    /// just before it went (for [`State::put_back_turn`]).
    fn drop_turns(
        &mut self,
        seg: &Segmentation,
        turns: &[usize],
        rule: &'static str,
        held: impl Fn(usize) -> bool,
    ) -> Vec<Vec<(usize, Fate)>> {
        let mut gone = vec![false; seg.turns.len()];
        let mut before = Vec::with_capacity(turns.len());
        for &i in turns {
            gone[i] = true;
            let r = seg.turns[i].clone();
            before.push(
                r.clone()
                    .filter_map(|w| self.work[w].src)
                    .map(|s| (s, self.fates[s].clone()))
                    .collect(),
            );
            self.drop_range(r, rule);
        }
        for (i, r) in seg.turns.iter().enumerate().filter(|(i, _)| !gone[*i]) {
            let why = if held(i) { "pinned_turn" } else { "kept_turn" };
            for w in r.clone() {
                self.set_fate(w, "kept", why);
            }
        }
        before
    }

    /// Put back turn `r`, the newest of the dropped turns, with the fates `before` its
    /// messages had when it went (the turns older than it are still gone, as they were
    /// then); they read `kept_turn` unless repair changed them.
    fn put_back_turn(&mut self, r: std::ops::Range<usize>, before: &[(usize, Fate)]) {
        for (s, f) in before {
            self.fates[*s] = f.clone();
        }
        for w in r {
            self.set_keep(w, true);
            self.set_fate(w, "kept", "kept_turn");
        }
    }

    fn drop_range(&mut self, idx: impl IntoIterator<Item = usize>, rule: &'static str) {
        for w in idx {
            self.set_keep(w, false);
            self.set_fate(w, "dropped", rule);
        }
    }

    /// Tokens of the stubs of work item `h` when it is a stub head, else 0.
    fn stub_tokens(&self, h: usize) -> u64 {
        stub_tokens(&self.work, &self.stub_head, self.opts.profile, h)
    }

    /// Cost of a breadcrumb inserted before work item `first` (0 when deduplicated).
    fn breadcrumb_cost(&self, first: Option<usize>) -> u64 {
        if !self.opts.breadcrumb || self.already_has_breadcrumb(first) {
            return 0;
        }
        let p = self.opts.profile;
        let text = *self.crumb_text.get_or_init(|| p.text_tokens(BREADCRUMB));
        match self.opts.format {
            Format::OpenAI => p.message_overhead + text,
            Format::Anthropic => text,
        }
    }

    /// Whether no breadcrumb goes into work item `first` (Anthropic's rules, where it is
    /// prepended to that user message): it leads with one already, or it holds nothing,
    /// and the breadcrumb alone, no user's words, would make it no turn boundary (the
    /// turn it starts would join the one before, and a thinking-led turn's rules with it).
    fn already_has_breadcrumb(&self, first: Option<usize>) -> bool {
        match (self.opts.format, first) {
            (Format::Anthropic, Some(w)) => {
                let m = &self.work[w].msg;
                holds_nothing(m) || m.first_text() == Some(BREADCRUMB)
            }
            _ => false,
        }
    }

    /// Whether part `part` of work item `w` ends an Anthropic prefill: the last part of
    /// an assistant message that is the last message kept (the model continues it, and
    /// the Messages API refuses it ending in whitespace).
    fn ends_prefill(&self, w: usize, part: usize) -> bool {
        let m: &Message = &self.work[w].msg;
        self.opts.format == Format::Anthropic
            && m.role == Role::Assistant
            && part + 1 == m.content.len()
            && !self.keep[w + 1..].iter().any(|&k| k)
    }

    /// Shrink text part `(part, inner)` of work item `w` so the total fits, if it helps.
    ///
    /// Never a cut whose marker costs as many tokens as the text it removes, or more
    /// (fresh12 O1). The cut is the largest that fits as a binary search over the
    /// characters kept finds it (a text's estimate is not monotone in them, so it can be
    /// a little short of the largest: README Known limits); when that one is not worth
    /// its marker, the largest smaller one that fits and is, so the text is cut a little
    /// further rather than left whole (a tool result or a reply: for the request to pay
    /// for; the request: leaving it over budget, where a smaller budget made it fit with
    /// a cut, fresh18 F1). The first `floor`
    /// characters always stay (an observation's `[Tool results]` prefix); a cut that ends
    /// an Anthropic prefill ([`State::ends_prefill`]) has no final newline. Returns the
    /// characters the cut removed (0: no cut) and, for the request's rule, whether what it
    /// kept is blank (`false` for the other rules).
    #[allow(clippy::too_many_arguments)]
    fn shrink(
        &mut self,
        w: usize,
        part: usize,
        inner: Option<usize>,
        floor: usize,
        budget: u64,
        rule: &'static str,
    ) -> (usize, bool) {
        let p = self.opts.profile;
        let text = {
            let m: &Message = &self.work[w].msg;
            let pt = &m.content[part];
            match inner {
                Some(q) => pt.inner()[q].text_str(),
                None => pt.text_str(),
            }
            .to_owned()
        };
        let chars = CharText::new(&text);
        let end = inner.is_none() && self.ends_prefill(w, part);
        let old = p.text_tokens(&text);
        let others = self.total() - old;
        let cost = |k: usize| others + p.text_tokens(&shrink_chars(&chars, floor, k, end).0);
        let fits = |k: usize| cost(k) <= budget;
        // the marker costs fewer tokens than the characters it stands for
        let worth = |k: usize| {
            let (head, tail_start) = prefill_cut_points(&chars, floor, k, end);
            let shown = shown_removed(&chars, head, tail_start);
            let mark = cut_marker(shown, end, tail_start == chars.len());
            p.text_tokens(&mark) < p.text_tokens(chars.slice(head, tail_start))
        };
        let mut lo = largest_within(chars.len() - floor, cost, budget, others + old);
        // the span is counted once for the cut made (`worth_lo`; for `lo` 0, only when the
        // other checks pass) and, rarely, in a second search below it
        let mut worth_lo = lo > 0 && worth(lo);
        if lo > 0 && !worth_lo {
            lo = largest_fitting(lo, |k| fits(k) && worth(k));
            worth_lo = worth(lo);
        }
        let (new_text, removed) = shrink_chars(&chars, floor, lo, end);
        let new_tokens = p.text_tokens(&new_text);
        if removed == 0 || new_tokens >= old || !(worth_lo || (lo == 0 && worth(0))) {
            return (0, false);
        }
        // for the request, whether the cut keeps nothing but blanks (its cuts are undone
        // when that is all its text keeps); no other rule asks
        let kept_blank = rule == "request_truncated" && {
            let (head, tail) = prefill_cut_points(&chars, floor, lo, end);
            wordless(chars.slice(0, head)) && wordless(chars.slice(tail, chars.len()))
        };
        let m = self.work[w].msg.to_mut();
        let target = match inner {
            Some(q) => &mut m.content[part].content.get_or_insert_with(Vec::new)[q],
            None => &mut m.content[part],
        };
        target.text = Some(new_text);
        self.put_cut(w, old, new_tokens, rule, removed);
        (removed, kept_blank)
    }

    /// Work item `w` as it is now, for [`State::restore`]: its message, its cost, the
    /// total and its message's fate.
    fn snapshot(&self, w: usize) -> Snapshot<'a> {
        (
            self.work[w].msg.clone(),
            self.costs[w],
            self.total,
            self.work[w].src.map(|i| self.fates[i].clone()),
        )
    }

    /// Work item `w` back as [`State::snapshot`] took it: the cuts made since undone.
    fn restore(&mut self, w: usize, (msg, cost, total, fate): Snapshot<'a>) {
        self.work[w].msg = msg;
        self.costs[w] = cost;
        self.total = total;
        if let (Some(i), Some(f)) = (self.work[w].src, fate) {
            self.fates[i] = f;
        }
    }

    /// Work item `w`'s text went from `old` to `new` tokens by a cut of `rule` removing
    /// `removed` characters: its cost, the total and its message's fate follow.
    /// `_reference._put_cut`.
    fn put_cut(&mut self, w: usize, old: u64, new: u64, rule: &'static str, removed: usize) {
        self.costs[w] = self.costs[w] - old + new;
        self.total = self.total - old + new;
        if let Some(i) = self.work[w].src {
            let f = &mut self.fates[i];
            f.fate = "truncated";
            f.rule = rule;
            f.chars_removed += removed as u64;
        }
    }

    /// Shrink the text parts `qs` (two or more) of tool result `part` of work item `w` to
    /// one common `keep`, the largest with which the total fits as a binary search finds
    /// it: parts no longer than that stay whole, each cut part keeps its head and its
    /// tail. A result in several text parts (MCP tools, Anthropic `tool_result` lists) so
    /// keeps the head of its first part and the tail of its last; cut largest first, one
    /// part went down to its marker before the next was touched (fresh26 #3). Parts whose
    /// cut at that keep would not pay for its marker stay whole and the others are cut
    /// again; with one part left, it is cut as [`State::shrink`] cuts a text. When that
    /// cuts nothing, the keep is the largest below the first one with which the total
    /// fits, the parts whose cut there pays for its marker cut and the others whole (as
    /// [`State::shrink`] cuts a text further). The cut across the parts ([`span_plan`])
    /// is taken instead where every part at its marker is still over, or where it fits
    /// and removes fewer characters (or the cut inside does not fit).
    /// `_reference._shrink_evenly`.
    fn shrink_evenly(
        &mut self,
        w: usize,
        part: usize,
        qs: &[usize],
        budget: u64,
        rule: &'static str,
    ) {
        let p = self.opts.profile;
        let texts: Vec<String> = {
            let inner = self.work[w].msg.content[part].inner();
            qs.iter().map(|&q| inner[q].text_str().to_owned()).collect()
        };
        let chars: Vec<CharText<'_>> = texts.iter().map(|t| CharText::new(t)).collect();
        let olds: Vec<u64> = texts.iter().map(|t| p.text_tokens(t)).collect();
        let old: u64 = olds.iter().sum();
        let others = self.total() - old;
        let mut active: Vec<usize> = (0..qs.len()).collect();
        let cut = |i: usize, k: usize| shrink_chars(&chars[i], 0, k, false);
        let worth = |i: usize, k: usize| {
            let (head, tail_start) = cut_points(&chars[i], 0, k);
            let shown = shown_removed(&chars[i], head, tail_start);
            let mark = cut_marker(shown, false, tail_start == chars[i].len());
            p.text_tokens(&mark) < p.text_tokens(chars[i].slice(head, tail_start))
        };
        // the parts' tokens, texts and characters removed with `cut_here` cut to `k`
        // (`None` when none is cut)
        let cuts_at = |k: usize, cut_here: &[usize]| -> Option<PartCuts> {
            if cut_here.is_empty() {
                return None;
            }
            let new: Vec<(usize, String, usize)> = cut_here
                .iter()
                .map(|&i| {
                    let (t, removed) = cut(i, k);
                    (i, t, removed)
                })
                .collect();
            let tokens = olds.iter().sum::<u64>()
                - new.iter().map(|(i, _, _)| olds[*i]).sum::<u64>()
                + new.iter().map(|(_, t, _)| p.text_tokens(t)).sum::<u64>();
            let removed = new.iter().map(|(_, _, r)| r).sum();
            Some((
                tokens,
                new.into_iter().map(|(i, t, _)| (i, t)).collect(),
                removed,
            ))
        };
        // every part whose cut pays for its marker cut to its marker alone: the fewest
        // tokens cuts inside the parts reach; over the budget, one marker for the middle
        // parts instead (fresh55 #1: 1,500 grep hits were each cut to a marker, 18,054
        // tokens for a budget of 2,000)
        let floor: u64 = (0..qs.len())
            .map(|i| {
                if worth(i, 0) {
                    p.text_tokens(&cut(i, 0).0)
                } else {
                    olds[i]
                }
            })
            .sum();
        let spans: Vec<(usize, u64)> = chars
            .iter()
            .map(|c| (c.len(), shown_removed(c, 0, c.len())))
            .collect();
        let span = span_plan(p, &olds, &spans, budget - others.min(budget));
        if others + floor > budget {
            self.apply_span(w, part, qs, span, old, rule);
            return;
        }
        // the cut inside the parts, then the cut across them instead when that fits and
        // keeps more characters (fresh56 #1: where 300 bare markers fit, all 300 parts
        // were cut to their markers, while a smaller budget kept 95 of them whole)
        let saved = self.snapshot(w);
        let removed_of = |st: &Self| st.work[w].src.map_or(0, |i| st.fates[i].chars_removed);
        let removed_before = removed_of(self);
        'even: {
            let mut fallback: Option<(usize, Vec<usize>)> = None;
            let mut stopped = false;
            let mut is_active = vec![true; qs.len()];
            while active.len() >= 2 {
                let top = active.iter().map(|&i| chars[i].len()).max().unwrap_or(0);
                let tokens_at = |k: usize| -> u64 {
                    (0..qs.len())
                        .map(|i| {
                            if is_active[i] {
                                p.text_tokens(&cut(i, k).0)
                            } else {
                                olds[i]
                            }
                        })
                        .sum()
                };
                let cut_at = |k: usize| -> Vec<usize> {
                    active
                        .iter()
                        .copied()
                        .filter(|&i| {
                            let (head, tail_start) = cut_points(&chars[i], 0, k);
                            head != tail_start
                        })
                        .collect()
                };
                let k = largest_within(top, |k| others + tokens_at(k), budget, others + old);
                let cut_here = cut_at(k);
                let unworthy: Vec<usize> =
                    cut_here.iter().copied().filter(|&i| !worth(i, k)).collect();
                if !unworthy.is_empty() {
                    if fallback.is_none() {
                        // the largest smaller keep that fits with the parts whose cut there
                        // pays for its marker cut (as a single text is cut further), the
                        // others whole: used when keeping the unworthy parts whole cuts nothing
                        let worthy = |j: usize| -> Vec<usize> {
                            cut_at(j).into_iter().filter(|&i| worth(i, j)).collect()
                        };
                        let ok = |j: usize| {
                            let cut = worthy(j);
                            !cut.is_empty()
                                && cuts_at(j, &cut).is_some_and(|(t, _, _)| others + t <= budget)
                        };
                        let j = largest_fitting(k, ok);
                        if ok(j) {
                            fallback = Some((j, worthy(j)));
                        }
                    }
                    for &i in &unworthy {
                        is_active[i] = false;
                    }
                    active.retain(|&i| is_active[i]);
                    continue;
                }
                if let Some((new_tokens, cuts, removed)) = cuts_at(k, &cut_here) {
                    if new_tokens < old {
                        self.apply_cuts(w, part, qs, cuts, (old, new_tokens), rule, removed);
                        break 'even;
                    }
                }
                stopped = true;
                break;
            }
            if !stopped {
                if let [i] = active[..] {
                    let before = self.total;
                    self.shrink(w, part, Some(qs[i]), 0, budget, rule);
                    if self.total != before {
                        break 'even;
                    }
                }
            }
            // no cut made otherwise (a budget was met and one token more was not:
            // test_fits_once_fits_for_every_larger_budget)
            if let Some((j, cut_here)) = fallback {
                if let Some((new_tokens, cuts, removed)) = cuts_at(j, &cut_here) {
                    if new_tokens < old {
                        self.apply_cuts(w, part, qs, cuts, (old, new_tokens), rule, removed);
                    }
                }
            }
        }
        let even_fits = self.total() <= budget;
        let even_removed = removed_of(self) - removed_before;
        if others + span.3 <= budget
            && span.3 < old
            && (!even_fits || (span.4 as u64) < even_removed)
        {
            self.restore(w, saved);
            self.apply_span(w, part, qs, span, old, rule);
        }
    }

    /// Apply the cut across parts `plan` ([`span_plan`]) to the text parts `qs` of tool
    /// result `part` of work item `w` (`old`: their tokens): the marker in the first
    /// removed part's place, the other removed parts deleted.
    fn apply_span(
        &mut self,
        w: usize,
        part: usize,
        qs: &[usize],
        (h, t, mark, tokens, removed): SpanPlan,
        old: u64,
        rule: &'static str,
    ) {
        let n = qs.len();
        if tokens >= old {
            return;
        }
        let m = self.work[w].msg.to_mut();
        let inner = m.content[part].content.get_or_insert_with(Vec::new);
        inner[qs[h]].text = Some(mark);
        // in one pass (a remove each moved the rest of the parts every time: fresh56 #2)
        let mut gone = vec![false; inner.len()];
        for &q in &qs[h + 1..n - t] {
            gone[q] = true;
        }
        let mut at = 0;
        inner.retain(|_| {
            at += 1;
            !gone[at - 1]
        });
        self.put_cut(w, old, tokens, rule, removed);
    }

    /// Write the cut texts `cuts` (`(index into qs, text)`) into tool result `part` of
    /// work item `w`, whose parts went from `tokens.0` to `tokens.1` tokens, `removed`
    /// characters cut ([`State::shrink_evenly`]).
    #[allow(clippy::too_many_arguments)]
    fn apply_cuts(
        &mut self,
        w: usize,
        part: usize,
        qs: &[usize],
        cuts: Vec<(usize, String)>,
        tokens: (u64, u64),
        rule: &'static str,
        removed: usize,
    ) {
        let m = self.work[w].msg.to_mut();
        let inner = m.content[part].content.get_or_insert_with(Vec::new);
        for (i, t) in cuts {
            inner[qs[i]].text = Some(t);
        }
        self.put_cut(w, tokens.0, tokens.1, rule, removed);
    }

    fn finish(
        mut self,
        budget: Option<u64>,
        reason: Option<&'static str>,
        turns: (u64, u64),
        breadcrumb_before: Option<usize>,
    ) -> Outcome<'a> {
        let p = self.opts.profile;
        // `costs[w]` is kept equal to the tokens of work item `w` (shrink updates it), so
        // only messages changed here are estimated again.
        let mut tokens_after: u64 = 0;
        let mut inserted = self
            .work
            .iter()
            .zip(&self.keep)
            .filter(|(w, k)| **k && w.src.is_none())
            .count() as u64;
        let mut breadcrumb = false;
        // where the breadcrumb goes: before a kept item, when there is one
        let crumb_at =
            breadcrumb_before.filter(|&w| self.opts.breadcrumb && self.keep.get(w) == Some(&true));
        let out = if crumb_at.is_none() {
            // no breadcrumb: the kept items where they are (a conversation that fits keeps
            // them all, and nothing moves)
            tokens_after = self
                .costs
                .iter()
                .zip(&self.keep)
                .filter(|(_, k)| **k)
                .map(|(c, _)| c)
                .sum();
            let mut work = std::mem::take(&mut self.work);
            let mut keep = self.keep.iter();
            work.retain(|_| keep.next().copied().unwrap_or(false));
            work
        } else {
            let mut out: Vec<Work<'a>> = Vec::with_capacity(self.work.len() + 1);
            for (w, item) in std::mem::take(&mut self.work).into_iter().enumerate() {
                if !self.keep[w] {
                    continue;
                }
                let mut item = item;
                let mut cost = self.costs[w];
                if crumb_at == Some(w) {
                    match self.opts.format {
                        Format::OpenAI => {
                            let crumb = Message::new(Role::User, vec![Part::text(BREADCRUMB)]);
                            tokens_after += p.message_tokens(&crumb);
                            out.push(Work {
                                src: None,
                                msg: Cow::Owned(crumb),
                            });
                            inserted += 1;
                            breadcrumb = true;
                        }
                        Format::Anthropic => {
                            // (not into a message that holds nothing:
                            // `already_has_breadcrumb`)
                            if item.msg.first_text() != Some(BREADCRUMB)
                                && !holds_nothing(&item.msg)
                            {
                                let m = item.msg.to_mut();
                                m.content.insert(0, Part::text(BREADCRUMB));
                                m.fix_content_kind();
                                cost += p.text_tokens(BREADCRUMB); // additive over parts
                                breadcrumb = true;
                                if let Some(f) = item.src.map(|i| &mut self.fates[i]) {
                                    if f.fate == "kept" {
                                        f.rule = "breadcrumb_added";
                                    }
                                }
                            }
                        }
                    }
                }
                tokens_after += cost;
                out.push(item);
            }
            out
        };
        let fits = budget.is_none_or(|b| tokens_after <= b);
        let dropped = self.fates.iter().filter(|f| f.fate == "dropped").count() as u64;
        let truncated = self.fates.iter().filter(|f| f.fate == "truncated").count() as u64;
        let changed = out.len() != self.input_len
            || out
                .iter()
                .enumerate()
                .any(|(i, w)| w.changed() || w.src != Some(i));
        let reason = if changed {
            reason.or(Some("tool_pairs"))
        } else {
            None
        };
        Outcome {
            messages: out,
            report: Report {
                tokens_before: self.tokens_before,
                tokens_after,
                budget,
                fits,
                reason,
                turns_before: turns.0,
                kept_turns: turns.1,
                dropped_turns: turns.0 - turns.1,
                dropped_messages: dropped,
                truncated_messages: truncated,
                inserted_messages: inserted,
                breadcrumb,
                repairs: self.repairs,
                fates: self.fates,
            },
        }
    }
}

/// Drop the oldest whole turns until the conversation fits `budget` tokens.
///
/// Keeps the preamble, every turn holding a pinned message and always the newest turn;
/// inserts the breadcrumb before the first kept turn that follows a dropped one (right
/// after the preamble unless a pinned turn precedes it). When the newest turn alone is
/// over budget: drops its oldest complete tool units (never the newest one, never one
/// holding a pinned message) until it fits, then puts back, newest first, dropped units
/// that still fit; then shrinks the largest tool results (head + tail + marker), an
/// observation's text ([`Message::is_observation`]) among them, its `[Tool results]`
/// prefix kept; then,
/// the same way, the assistant text after the current request (a finished transcript:
/// the answer to it; rule `reply_shrunk`); then truncates the current request, only when
/// that makes it fit. No cut is made whose marker costs as many tokens as the text it
/// removes, or more (fresh12 O1): the text is cut a little further instead. Broken tool pairs
/// are repaired first (`missing="stub"`). Returns the input unchanged when it fits.
///
/// The breadcrumb is a courtesy: it may cost whole old turns, never anything of the
/// newest turn. With `opts.breadcrumb` on, the result with it is worked out first, and
/// the result without it too unless the first fits with nothing taken from the newest
/// turn; the one returned is, in order:
/// 1. the result with the breadcrumb, when it fits and loses no more of the newest turn
///    than the result without it: no more characters cut (tool results shrunk plus the
///    request truncated) and no more of the newest turn's messages dropped (tool units),
///    unless it put no breadcrumb in after all and dropped more messages than that one;
/// 2. else the result without the breadcrumb, when it fits;
/// 3. else (neither fits) the smaller of the two, the one with the breadcrumb on a tie:
///    the caller decides. (It was the one with the breadcrumb, which drops turns only
///    when that shrinks the conversation at all: where the breadcrumb cost more than the
///    old turns, the input came back whole at one budget and two messages at the next,
///    so a larger budget kept fewer tokens: fresh14 #7.)
///
/// So the request is never cut, nor the result left over budget, to make room for the
/// breadcrumb (found by new users: 49 tokens over a budget of 40 where 35 fit; fresh8 N1:
/// the breadcrumb cost more than the old turn it replaced, so the old turn stayed and the
/// request was cut to one letter, or nothing was done, where the request alone fit whole).
pub fn trim_turns<'a>(messages: &'a [Message], budget: u64, opts: TrimOptions<'_>) -> Outcome<'a> {
    trim_turns_with(messages, budget, opts, Costs::All)
}

/// [`trim_turns`] for a caller that needs the messages only: the same messages and the
/// same report, except that the report's `tokens_before` is 0 (not computed), and the
/// messages of old turns that no trim to `budget` could keep are not estimated (see
/// `kept_only_costs`). A gateway that drops half a long conversation skips half the
/// estimation.
pub fn trim_turns_kept_only<'a>(
    messages: &'a [Message],
    budget: u64,
    opts: TrimOptions<'_>,
) -> Outcome<'a> {
    trim_turns_with(messages, budget, opts, Costs::KeptOnly(budget))
}

fn trim_turns_with<'a>(
    messages: &'a [Message],
    budget: u64,
    opts: TrimOptions<'_>,
    which: Costs,
) -> Outcome<'a> {
    let (out, out_units) = trim_turns_once(messages, budget, opts, which);
    // The result without the breadcrumb is not worked out when this one is it (one turn:
    // none dropped, so no breadcrumb nor room for one; fresh27 #6), or when this one fits,
    // loses nothing of the newest turn and put its breadcrumb in or dropped no turn (one
    // that dropped turns and put none in, since the message it would go into could not
    // take one, may have dropped a turn more for a breadcrumb that then was free).
    if !opts.breadcrumb
        || out.report.turns_before <= 1
        || (out.report.fits
            && took_nothing_of_the_newest_turn(&out.report)
            && (out.report.breadcrumb || out.report.dropped_turns == 0))
    {
        return out;
    }
    let (bare, bare_units) = trim_turns_once(
        messages,
        budget,
        TrimOptions {
            breadcrumb: false,
            ..opts
        },
        which,
    );
    let with = (&out.report, out_units);
    if choose_with_breadcrumb(with, (&bare.report, bare_units)) {
        out
    } else {
        bare
    }
}

/// The fates some messages had (by input index), to put back with them.
type FatesBefore = Vec<(usize, Fate)>;

/// Whether a trim cut no characters and dropped no tool unit of the newest turn.
fn took_nothing_of_the_newest_turn(r: &Report) -> bool {
    r.fates
        .iter()
        .all(|f| f.chars_removed == 0 && f.rule != "oldest_tool_unit")
}

/// What a trim took from the newest turn: (characters cut from tool results and the
/// request, tokens of the messages dropped with its oldest tool units, `units`). Tokens,
/// not messages: a trim that keeps a smaller unit where the other keeps a larger one
/// loses more (fresh42 #2: with the breadcrumb on, an old turn cheaper than the
/// breadcrumb stayed and unit `b` went, where without it unit `a`, a third of `b`, went).
fn newest_turn_loss(r: &Report, units: u64) -> (u64, u64) {
    (r.fates.iter().map(|f| f.chars_removed).sum(), units)
}

/// The rule of [`trim_turns`]: whether the result with the breadcrumb (`with`) wins over
/// the one without it (`bare`), each given with the tokens of its dropped tool units.
fn choose_with_breadcrumb(with: (&Report, u64), bare: (&Report, u64)) -> bool {
    let (a, b) = (
        newest_turn_loss(with.0, with.1),
        newest_turn_loss(bare.0, bare.1),
    );
    let (with, bare) = (with.0, bare.0);
    if with.fits && (!bare.fits || (a.0 <= b.0 && a.1 <= b.1)) {
        // unless no breadcrumb went in after all (the message after the dropped turns
        // could not take one: Anthropic's, with no content) and the result without it
        // fits, loses no more of the newest turn and drops fewer messages (found by
        // hypothesis: a free breadcrumb at a pinned empty message cost an old turn)
        let bare_better = !with.breadcrumb
            && bare.fits
            && b.0 <= a.0
            && b.1 <= a.1
            && bare.dropped_messages < with.dropped_messages;
        return !bare_better;
    }
    !bare.fits && with.tokens_after <= bare.tokens_after
}

/// [`trim_turns`] with the breadcrumb as `opts` says, whether or not it fits; with the
/// tokens of the newest turn's tool units it dropped.
fn trim_turns_once<'a>(
    messages: &'a [Message],
    budget: u64,
    opts: TrimOptions<'_>,
    which: Costs,
) -> (Outcome<'a>, u64) {
    let mut st = State::new(messages, opts, Missing::Stub, which);
    let seg = st.segment();
    let n_turns = seg.turns.len() as u64;
    if st.total() <= budget || seg.turns.is_empty() {
        return (st.finish(Some(budget), None, (n_turns, n_turns), None), 0);
    }
    for w in 0..seg.preamble_end {
        st.set_fate(w, "kept", "preamble");
    }
    let mut unit_tokens = 0;
    let turn_cost: Vec<u64> = seg
        .turns
        .iter()
        .map(|r| r.clone().map(|w| st.costs[w]).sum())
        .collect();
    let pre: u64 = st.costs[..seg.preamble_end].iter().sum();
    let t = seg.turns.len();
    // Turns that may go, oldest first (see `droppable_turns`): dropping a turn takes the
    // stubs answering its calls out of the next one, which then costs `saving[i]` less.
    let saving: Vec<u64> = seg.turns.iter().map(|r| st.stub_tokens(r.start)).collect();
    let droppable = droppable_turns(&st.work, &seg, &st.stub_head);
    // The breadcrumb goes before the first kept turn that follows a dropped turn. With
    // the k oldest droppable turns gone, that is the turn right after the leading run of
    // consecutive indices among them (O(1) per k, so the search below stays linear).
    let consecutive = droppable
        .iter()
        .enumerate()
        .take_while(|(j, &i)| i == droppable[0] + j)
        .count();
    let bc_turn = |k: usize| -> Option<usize> {
        let first = *droppable.first()?;
        Some(first + k.min(consecutive)).filter(|&i| i < t)
    };
    let all: u64 = turn_cost.iter().sum();
    let mut dropped = droppable.len();
    let mut removed = 0;
    let mut feasible = false;
    for k in 1..=droppable.len() {
        let d = droppable[k - 1];
        // turn d - 1 went before d when d's head holds stubs (see `can_go`)
        removed += turn_cost[d] - saving[d] + saving.get(d + 1).copied().unwrap_or(0);
        let bc = st.breadcrumb_cost(bc_turn(k).map(|i| seg.turns[i].start));
        if pre + all - removed + bc <= budget {
            dropped = k;
            feasible = true;
            break;
        }
    }
    // Out of reach even without every droppable turn: drop them only if that shrinks
    // the conversation at all (tiny turns can cost less than the breadcrumb).
    if !feasible && dropped > 0 {
        let bc = st.breadcrumb_cost(bc_turn(dropped).map(|i| seg.turns[i].start));
        if removed <= bc {
            dropped = 0;
        }
    }
    // a pinned turn stayed for its pin where a newer turn went, or where the turns that
    // could go were not enough (the report says so: a tester read `kept_turn` on a
    // pinned turn over budget as a trim that did nothing)
    let newest_gone = droppable[..dropped].last().copied();
    let held = |i: usize| {
        i + 1 < t
            && (!feasible || newest_gone.is_some_and(|d| d > i))
            && holds_pinned(&st.work, &seg.turns[i])
    };
    let held: Vec<bool> = (0..t).map(held).collect();
    let fates_before = st.drop_turns(&seg, &droppable[..dropped], "oldest_turn", |i| held[i]);
    let bc_at_k = |st: &State, k: usize| -> (Option<usize>, u64) {
        if k == 0 {
            return (None, 0);
        }
        let at = bc_turn(k).map(|i| seg.turns[i].start);
        (at, st.breadcrumb_cost(at))
    };
    let (mut bc_at, mut bc_cost) = bc_at_k(&st, dropped);
    // The newest turn alone is over budget: work inside it. The current request is the
    // input's last real user message; repair may have made it a tool-result carrier
    // (a result moved out of its call's assistant message goes into the next user
    // message), so it is found by origin. Or the last real user message after repair when
    // that is later: one that held only an orphan result beside what the user wrote.
    let last = seg.turns[t - 1].clone();
    let request = crate::turns::last_real_user(messages)
        .and_then(|i| st.work.iter().position(|w| w.src == Some(i)))
        .max(seg.current_request);
    // the first assistant message of the newest turn when it starts with a thinking
    // block stays as a pinned one does, its tool unit whole (fresh20b #1); found in the
    // repaired list, the one sent (a result repair moved into the request makes it no
    // turn boundary)
    let anchor = thinking_anchor(&st.work, st.opts.format);
    let over = |st: &State| st.total() + bc_cost > budget;
    if over(&st) {
        let units = newest_turn_units(&st.work, &seg, last.clone());
        if let Some((_, older)) = units.split_last() {
            // each with the fates its messages had before it went (a repair's stays when
            // it comes back: fresh42 #1)
            let mut gone: Vec<(&Vec<usize>, FatesBefore)> = Vec::new();
            for u in older {
                if !over(&st) {
                    break;
                }
                // nor a call whose stubs sit in the real user message after it (before
                // the first real user message): two user messages would meet
                let stubbed = st.stub_head.get(u[u.len() - 1] + 1) == Some(&true);
                if stubbed
                    || u.iter()
                        .any(|&w| st.work[w].msg.pinned || Some(w) == request || Some(w) == anchor)
                {
                    continue;
                }
                let before = u
                    .iter()
                    .filter_map(|&w| st.work[w].src)
                    .map(|i| (i, st.fates[i].clone()))
                    .collect();
                st.drop_range(u.iter().copied(), "oldest_tool_unit");
                gone.push((u, before));
            }
            // Refill: put back dropped units, newest first, that fit in what is left
            // (a huge unit dropped last can leave room for smaller older ones).
            for (u, before) in gone.into_iter().rev() {
                let cost: u64 = u.iter().map(|&w| st.costs[w]).sum();
                if st.total() + cost + bc_cost <= budget {
                    for (i, f) in before {
                        st.fates[i] = f;
                    }
                    for &w in u {
                        st.set_keep(w, true);
                        st.set_fate(w, "kept", "kept_turn");
                    }
                } else {
                    unit_tokens += cost;
                }
            }
        }
    }
    // Then the old turns that went before the newest turn was worked on come back, newest
    // first, while they fit with their breadcrumb (none once all are back): the newest
    // turn's units were worth more than they, not the room the units left (fresh41 #1:
    // an old turn of 10 tokens stayed out of a result of 63 at budget 150). Turns stay
    // gone oldest first, so the first that does not fit ends it.
    if !feasible && !over(&st) {
        while dropped > 0 {
            let r = seg.turns[droppable[dropped - 1]].clone();
            let (at, cost) = bc_at_k(&st, dropped - 1);
            // its messages as they are now, a lower bound (putting them back can also put
            // back the stubs answering its calls in the turn after it)
            let gain: u64 = r.clone().map(|w| st.costs[w]).sum();
            if st.total() + gain + cost > budget {
                break;
            }
            st.put_back_turn(r.clone(), &fates_before[dropped - 1]);
            if st.total() + cost > budget {
                // undone as it was done: the stubs go again, the fates read as before
                st.drop_range(r, "oldest_turn");
                break;
            }
            dropped -= 1;
            bc_at = at;
            bc_cost = cost;
        }
    }
    let over = |st: &State| st.total() + bc_cost > budget;
    // The tool results, and the text of observations (a text-action agent's tool output,
    // given back as user text starting with `[Tool results]`: fresh15 #4, the request was
    // cut to one character while 1,800 characters of `ls` output stayed whole), largest
    // first; an observation keeps its prefix, so it still reads as one.
    if over(&st) {
        // (len, w, part, inner: None for an observation's own text part, the other text
        // parts of the same tool result: cut with it to one common keep, fresh26 #3); a
        // tool result in several text parts takes its place by its longest
        type Cand = (usize, usize, usize, Option<usize>, Vec<usize>);
        let mut cands: Vec<Cand> = Vec::new();
        for w in last
            .clone()
            .filter(|&w| st.keep[w] && !st.work[w].msg.pinned)
        {
            let m = &st.work[w].msg;
            let observation = m.is_observation();
            for (p, part) in m.content.iter().enumerate() {
                if part.kind == PartKind::ToolResult {
                    let texts: Vec<(usize, usize)> = part
                        .inner()
                        .iter()
                        .enumerate()
                        .filter(|(_, x)| x.kind == PartKind::Text && !x.text_str().is_empty())
                        .map(|(q, x)| (x.text_str().chars().count(), q))
                        .collect();
                    // the longest, the first of equals
                    if let Some(&(len, q)) = texts
                        .iter()
                        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
                    {
                        let all = texts.iter().map(|&(_, q)| q).collect();
                        cands.push((len, w, p, Some(q), all));
                    }
                } else if observation && part.kind == PartKind::Text && !part.text_str().is_empty()
                {
                    cands.push((part.text_str().chars().count(), w, p, None, Vec::new()));
                }
            }
        }
        cands.sort_by(|a, b| b.0.cmp(&a.0).then((a.1, a.2, a.3).cmp(&(b.1, b.2, b.3))));
        let prefix = TOOL_RESULTS_PREFIX.chars().count();
        for (_, w, p, q, all) in cands {
            if !over(&st) {
                break;
            }
            if all.len() >= 2 {
                st.shrink_evenly(
                    w,
                    p,
                    &all,
                    budget - bc_cost.min(budget),
                    "tool_result_shrunk",
                );
                continue;
            }
            let floor = match q {
                None if st.work[w].msg.content[p]
                    .text_str()
                    .starts_with(TOOL_RESULTS_PREFIX) =>
                {
                    prefix
                }
                _ => 0,
            };
            st.shrink(
                w,
                p,
                q,
                floor,
                budget - bc_cost.min(budget),
                "tool_result_shrunk",
            );
        }
    }
    // A finished transcript: the newest turn's assistant text after the current request
    // (the answer to it) is cut as tool results are, largest first, before the request
    // itself is (fresh12 O1: the question was cut to one letter while the 1,398-character
    // answer after it stayed whole).
    if over(&st) {
        if let Some(r) = request.filter(|&w| last.contains(&w)) {
            // a text-action step's command is its call, not a reply: never cut (fresh54
            // #1: the newest step's command went down to its marker)
            let mut head = vec![false; st.work.len()];
            for step in text_action_steps(&st.work, &seg, last.clone()) {
                head[step[0]] = true;
            }
            let mut cands: Vec<(usize, usize, usize)> = Vec::new(); // (len, w, part)
            for w in (r + 1..last.end).filter(|&w| {
                let m = &st.work[w].msg;
                st.keep[w]
                    && !m.pinned
                    && Some(w) != anchor
                    && m.role == Role::Assistant
                    && !head[w]
            }) {
                for (p, part) in st.work[w].msg.content.iter().enumerate() {
                    if part.kind == PartKind::Text && !part.text_str().is_empty() {
                        cands.push((part.text_str().chars().count(), w, p));
                    }
                }
            }
            cands.sort_by(|a, b| b.0.cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
            for (_, w, p) in cands {
                if !over(&st) {
                    break;
                }
                st.shrink(w, p, None, 0, budget - bc_cost.min(budget), "reply_shrunk");
            }
        }
    }
    if over(&st) {
        if let Some(w) = request.filter(|&w| last.contains(&w) && !st.work[w].msg.pinned) {
            let mut cands: Vec<(usize, usize)> = st.work[w]
                .msg
                .content
                .iter()
                .enumerate()
                .filter(|(_, p)| p.kind == PartKind::Text && !p.text_str().is_empty())
                .map(|(i, p)| (p.text_str().chars().count(), i))
                .collect();
            cands.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            // A shortcut: no cut is tried when even every part cut to its marker would
            // leave the conversation over budget (the restore below keeps the rule when
            // the cuts give less than this).
            let p = st.opts.profile;
            let content = &st.work[w].msg.content;
            let saving: u64 = cands
                .iter()
                .map(|&(n, i)| {
                    let old = p.text_tokens(content[i].text_str());
                    old.saturating_sub(p.text_tokens(&marker(n)))
                })
                .sum();
            if st.total() + bc_cost > budget + saving {
                cands.clear();
            }
            // the request as it was, put back when its cuts do not make it fit: a part
            // whose marker would cost as much as its text is never cut, so the saving
            // above can be more than the cuts give
            let whole = st.snapshot(w);
            // the parts with words left: those not cut, and those cut to more than blanks
            let content = &st.work[w].msg.content;
            let mut worded: Vec<bool> = content
                .iter()
                .map(|q| q.kind == PartKind::Text && !wordless(q.text_str()))
                .collect();
            let any_words = worded.iter().any(|&x| x);
            for (_, p) in cands {
                if !over(&st) {
                    break;
                }
                let (removed, kept_blank) = st.shrink(
                    w,
                    p,
                    None,
                    0,
                    budget - bc_cost.min(budget),
                    "request_truncated",
                );
                if removed > 0 {
                    worded[p] = !kept_blank;
                }
            }
            // nor when they leave none of its words, its markers alone or blanks (fresh32
            // #1: a request of 486 characters came back as its marker, reported to fit:
            // the model would get no question; fresh34 #1: an indented one as a space); it
            // stays whole and the report says it does not fit
            if over(&st) || (any_words && !worded.iter().any(|&x| x)) {
                st.restore(w, whole);
            }
        }
    }
    let kept = (t - dropped) as u64;
    let out = st.finish(Some(budget), Some("token_budget"), (n_turns, kept), bc_at);
    (out, unit_tokens)
}

/// Keep the newest `max(1, max_turns)` turns (plus the preamble), with the breadcrumb.
pub fn trim_turn_count<'a>(
    messages: &'a [Message],
    max_turns: u64,
    opts: TrimOptions<'_>,
) -> Outcome<'a> {
    let mut st = State::new(messages, opts, Missing::Stub, Costs::All);
    let seg = st.segment();
    let t = seg.turns.len();
    let keep = (max_turns.max(1) as usize).min(t);
    // the turns older than the newest `keep` that may go: as in `trim_turns`, never one
    // holding a pinned message, never one opened by stubs answering the calls of a turn
    // that stays (fresh19 F3: a pinned message in an old turn was dropped)
    let droppable: Vec<usize> = droppable_turns(&st.work, &seg, &st.stub_head)
        .into_iter()
        .filter(|&i| i < t - keep)
        .collect();
    // a pinned turn older than the newest `keep` stays for its pin
    let held: Vec<bool> = (0..t)
        .map(|i| i < t - keep && holds_pinned(&st.work, &seg.turns[i]))
        .collect();
    if droppable.is_empty() && !held.contains(&true) {
        return st.finish(None, None, (t as u64, t as u64), None);
    }
    for w in 0..seg.preamble_end {
        st.set_fate(w, "kept", "preamble");
    }
    st.drop_turns(&seg, &droppable, "turn_limit", |i| held[i]);
    let Some(&first) = droppable.first() else {
        // nothing may go, but the limit applied: the fates say which turns stay over it
        // for their pin (they said `fits` for every message)
        return st.finish(None, Some("turn_limit"), (t as u64, t as u64), None);
    };
    // the breadcrumb goes before the first kept turn after a dropped one (the newest
    // turn is never droppable, so there is one)
    let consecutive = droppable
        .iter()
        .enumerate()
        .take_while(|(j, &i)| i == first + j)
        .count();
    let bc_at = Some(seg.turns[first + consecutive].start);
    let kept = (t - droppable.len()) as u64;
    st.finish(None, Some("turn_limit"), (t as u64, kept), bc_at)
}

/// Repair tool pairs and report every change (no budget).
pub fn repair_report<'a>(
    messages: &'a [Message],
    missing: Missing,
    opts: TrimOptions<'_>,
) -> Outcome<'a> {
    let mut st = State::new(messages, opts, missing, Costs::All);
    let t = st.segment().turns.len() as u64;
    st.finish(None, Some("tool_pairs"), (t, t), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::FIM;

    fn text(role: Role, t: &str) -> Message {
        Message::new(role, vec![Part::text(t)])
    }

    fn call(ids: &[&str]) -> Message {
        let parts = ids
            .iter()
            .map(|id| Part {
                id: Some((*id).into()),
                name: Some("f".into()),
                arguments: Some("{}".into()),
                ..Part::empty(PartKind::ToolCall)
            })
            .collect();
        Message::new(Role::Assistant, parts)
    }

    fn result(role: Role, id: &str) -> Message {
        let mut p = Part::missing_result(id);
        p.content = Some(vec![Part::text("r")]);
        Message::new(role, vec![p])
    }

    #[test]
    fn a_cut_takes_a_marker_the_text_holds_whole_and_adds_its_count() {
        // fresh27 #1: the guard cut a cut log again; the new marker named only what the
        // second cut removed, or the first marker was split
        let text = format!(
            "{}\n[... 500 characters removed ...]\n{}",
            "a".repeat(100),
            "b".repeat(100)
        );
        assert_eq!(find_markers(&text), vec![(101, 133, 500)]);
        // the span 50..184 holds the whole marker: 134 removed, 134 - 32 + 500 named
        let (t, removed) = shrink_text(&text, 100);
        assert_eq!(removed, 134);
        let want = format!(
            "{}\n[... 602 characters removed ...]\n{}",
            "a".repeat(50),
            "b".repeat(50)
        );
        assert_eq!(t, want);
        // a cut inside the marker (110..124) takes it whole: the count stays 500
        let (t, removed) = shrink_text(&text, 220);
        assert_eq!(removed, 32);
        let want = format!(
            "{}\n\n[... 500 characters removed ...]\n\n{}",
            "a".repeat(100),
            "b".repeat(100)
        );
        assert_eq!(t, want);
        // the compaction functions' marker, with its line count, and malformed ones
        let lines = "x\n[... 20060 characters (2006 lines) removed ...]\ny";
        assert_eq!(find_markers(lines), vec![(2, 49, 20060)]);
        assert_eq!(
            find_markers("[... 1 characters (1 line) removed ...][... 2 characters removed ...]"),
            vec![(0, 39, 1), (39, 69, 2)]
        );
        for bad in [
            "[... characters removed ...]",
            "[... 1234567890123456789 characters removed ...]",
            "[... 5 characters (x lines) removed ...]",
            "[... 5 characters removed ..]",
            "[... ٣ characters removed ...]",
        ] {
            assert_eq!(find_markers(bad), vec![], "{bad}");
        }
        // a marker in non-ASCII text: character, not byte, positions
        let cjk = format!("{}[... 7 characters removed ...]", "中".repeat(3));
        assert_eq!(CharText::new(&cjk).markers, vec![(3, 33, 7)]);
    }

    #[test]
    fn a_floor_keeps_the_prefix_and_graphemes_whole() {
        let seen = format!("[Tool results] {}", "x".repeat(385));
        let seen = CharText::new(&seen);
        // keep 87 after the 14-character prefix: head 14 + 44, tail 43
        assert_eq!(cut_points(&seen, 14, 87), (58, 357));
        assert_eq!(cut_points(&seen, 14, 386), (400, 400));
        let (t, removed) = shrink_chars(&seen, 14, 0, false);
        assert_eq!(
            (t.as_str(), removed),
            ("[Tool results]\n[... 386 characters removed ...]\n", 386)
        );
        // floor 0 is the plain cut
        assert_eq!(cut_points(&seen, 0, 87), (44, 357));
        // a combining mark on the prefix's `]` stays with it: the head moves forward
        let marked = format!("[Tool results]\u{301}{}", "x".repeat(100));
        let marked = CharText::new(&marked);
        assert_eq!(cut_points(&marked, 14, 0), (15, 115));
        // and when it then reaches the tail, nothing is cut
        let short = CharText::new("[Tool results]\u{301}\u{301}\u{301}x");
        assert_eq!(cut_points(&short, 14, 0), (17, 18));
        assert_eq!(cut_points(&short, 14, 2), (18, 18));
        assert_eq!(shrink_chars(&short, 14, 2, false).1, 0);
    }

    #[test]
    fn a_result_in_many_small_parts_is_cut_across_them() {
        // 200 parts of 11 characters: every part at its marker alone is still over, so the
        // parts between the first and the last go behind one marker (fresh55 #1)
        let lines: Vec<String> = (0..200).map(|i| format!("hit {i:06}\n")).collect();
        let mut res = Part::missing_result("c1");
        res.content = Some(lines.iter().map(|t| Part::text(t)).collect());
        let msgs = vec![
            text(Role::User, "find"),
            call(&["c1"]),
            Message::new(Role::User, vec![res]),
        ];
        let opts = TrimOptions {
            profile: &FIM,
            breadcrumb: true,
            format: Format::Anthropic,
        };
        let out = trim_turns(&msgs, 120, opts);
        assert!(out.report.fits && out.report.tokens_after <= 120);
        let inner = out.messages[2].msg.content[0].inner();
        let k = inner.len() - 1;
        let (h, t) = (k - k / 2, k / 2);
        assert!(k > 2 && h + t == k);
        let texts: Vec<&str> = inner.iter().map(|p| p.text_str()).collect();
        assert!(texts[..h].iter().zip(&lines[..h]).all(|(a, b)| a == b));
        assert!(texts[h + 1..]
            .iter()
            .zip(&lines[200 - t..])
            .all(|(a, b)| a == b));
        let gone = 11 * (200 - k);
        assert_eq!(texts[h], marker(gone));
        assert_eq!(out.report.fates[2].chars_removed, gone as u64);
        assert_eq!(out.report.fates[2].rule, "tool_result_shrunk");
        // one part more would not fit
        let mut more = msgs.clone();
        let kept = k + 1;
        let tail = kept / 2;
        let mut parts: Vec<Part> = lines[..kept - tail].iter().map(|t| Part::text(t)).collect();
        parts.push(Part::text(&marker(11 * (200 - kept))));
        parts.extend(lines[200 - tail..].iter().map(|t| Part::text(t)));
        more[2].content[0].content = Some(parts);
        let total: u64 = more.iter().map(|m| FIM.message_tokens(m)).sum();
        assert!(total > 120, "{total}");
    }

    #[test]
    fn a_run_of_marks_past_the_stream_safe_limit_can_be_cut() {
        // "e" and 100,000 combining acutes: one grapheme by UAX #29, so no cut could
        // enter it; after 30 attaching characters (UAX #15's limit) a cut may
        let t = format!("e{}", "\u{301}".repeat(100_000));
        let c = CharText::new(&t);
        // positions 1..=30 follow fewer than 30 marks (or the base): not cut there
        assert!((1..=30).all(|p| bad_cut(&c, p)));
        assert!((31..100_000).all(|p| !bad_cut(&c, p)));
        // keep 14: the head (7) moves back to 0, the tail starts 7 from the end
        assert_eq!(cut_points(&c, 0, 14), (0, 99_994));
        // a chain of ZWJ emoji (one grapheme of 2,001 code points): cut after 31
        let chain = format!("\u{1F468}{}", "\u{200D}\u{1F468}".repeat(1_000));
        let chain = CharText::new(&chain);
        assert!((1..31).all(|p| bad_cut(&chain, p)) && (31..2_001).all(|p| !bad_cut(&chain, p)));
        // and so after a run of 30 ZWJs (each one attaching)
        let z = format!("\u{1F468}{}x", "\u{200D}".repeat(40));
        let z = CharText::new(&z);
        assert!(bad_cut(&z, 30) && !bad_cut(&z, 31) && !bad_cut(&z, 41));
        // 29 marks and a base letter: the grapheme stays whole
        let short = format!("a{}b", "\u{301}".repeat(29));
        let short = CharText::new(&short);
        assert!((1..30).all(|p| bad_cut(&short, p)) && !bad_cut(&short, 30));
    }

    #[test]
    fn segmenting_with_the_inputs_resolution_finds_what_resolving_again_finds() {
        // Every prefix of conversations that repair leaves in place and of ones it
        // changes (an orphan result, an unanswered call, results apart from their call,
        // an Anthropic carrier), in both shapes and both ways of repairing: the
        // segmentation `State::segment` makes is the one `segment` makes of the work
        // list, and it reuses the resolution exactly when repair left the list in place.
        use Role::{Assistant as A, System as S, Tool as T, User as U};
        let conversations = [
            vec![
                text(S, "s"),
                text(U, "q1"),
                call(&["a", "b"]),
                result(T, "b"),
                result(T, "a"),
                text(A, "x"),
                text(U, "q2"),
                call(&["a"]),
                result(T, "a"),
                text(U, "q3"),
            ],
            vec![
                text(U, "q1"),
                result(T, "zz"),
                call(&["c"]),
                text(A, "between"),
                result(T, "c"),
                text(U, "q2"),
                call(&["d"]),
            ],
            vec![
                text(U, "q1"),
                call(&["e"]),
                result(U, "e"),
                text(A, "x"),
                text(U, "q2"),
                call(&["f"]),
                text(U, "q3"),
            ],
        ];
        let (mut reused, mut resolved) = (0, 0);
        for conv in &conversations {
            for n in 1..=conv.len() {
                for format in [Format::OpenAI, Format::Anthropic] {
                    for missing in [Missing::Stub, Missing::Drop] {
                        let opts = TrimOptions {
                            profile: &FIM,
                            breadcrumb: true,
                            format,
                        };
                        let mut st = State::new(&conv[..n], opts, missing, Costs::All);
                        let in_place = st.work.len() == n
                            && st.work.iter().enumerate().all(|(i, w)| {
                                w.src == Some(i)
                                    && matches!(&w.msg, Cow::Borrowed(m) if std::ptr::eq(*m, &conv[i]))
                            });
                        assert_eq!(st.resolution.is_some(), in_place);
                        let want = segment(&st.work);
                        assert_eq!(st.segment(), want, "{n} messages, {format:?}");
                        if in_place {
                            reused += 1;
                        } else {
                            resolved += 1;
                        }
                    }
                }
            }
        }
        // both ways were taken, many times
        assert!(reused > 20 && resolved > 20, "{reused} {resolved}");
    }

    #[test]
    fn estimating_only_what_can_be_kept_trims_the_same() {
        // Every budget from 0 past the total, both shapes, with and without the
        // breadcrumb, every profile: `trim_turns_kept_only` keeps and writes what
        // `trim_turns` does and reports the same, but for `tokens_before` (not computed).
        // The conversations hold a pinned old turn, an interrupted Anthropic call whose
        // stubs open the next turn, tiny turns worth less than the breadcrumb, and a
        // newest turn over any small budget.
        use Role::{Assistant as A, System as S, Tool as T, User as U};
        let mut pinned = text(U, "keep this one, it is pinned");
        pinned.pinned = true;
        let long = "a long request with many words in it ".repeat(12);
        let conversations = [
            vec![
                text(S, "system prompt"),
                text(U, "q1 first question"),
                call(&["a", "b"]),
                result(T, "a"),
                result(T, "b"),
                text(A, "answer one"),
                pinned.clone(),
                text(A, "ok"),
                text(U, "q3"),
                call(&["c"]),
                text(U, "interrupted"),
                text(A, "fine"),
                text(U, "a"),
                text(U, "b"),
                text(U, &long),
                call(&["d"]),
                result(T, "d"),
            ],
            vec![text(U, "x"), text(U, "y"), text(U, "z"), text(U, &long)],
            vec![
                text(S, "s"),
                text(U, "q1"),
                call(&["e"]),
                result(U, "e"),
                text(A, "reply"),
                text(U, "q2"),
                call(&["f"]),
                text(U, "q3 after an unanswered call"),
                text(A, &long),
            ],
        ];
        let mut cut = 0;
        for conv in &conversations {
            for profile in crate::estimate::PROFILES {
                for format in [Format::OpenAI, Format::Anthropic] {
                    for breadcrumb in [true, false] {
                        let opts = TrimOptions {
                            profile,
                            breadcrumb,
                            format,
                        };
                        let total = trim_turns(conv, u64::MAX, opts).report.tokens_before;
                        for budget in 0..=total + 1 {
                            let all = trim_turns(conv, budget, opts);
                            let some = trim_turns_kept_only(conv, budget, opts);
                            let written = |o: &Outcome<'_>| -> Vec<(Option<usize>, String)> {
                                o.messages
                                    .iter()
                                    .map(|w| (w.src, serde_json::to_string(&*w.msg).unwrap()))
                                    .collect()
                            };
                            assert_eq!(written(&all), written(&some), "{budget} {profile:?}");
                            assert_eq!(some.report.tokens_before, 0);
                            let mut want = all.report.clone();
                            want.tokens_before = 0;
                            assert_eq!(some.report, want, "{budget}");
                            // placeholders were used (old turns not estimated)
                            let st = State::new(conv, opts, Missing::Stub, Costs::KeptOnly(budget));
                            let real = State::new(conv, opts, Missing::Stub, Costs::All);
                            if st.costs != real.costs {
                                cut += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(cut > 1000, "{cut}");
    }
}
