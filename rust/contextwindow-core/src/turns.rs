//! Turns and tool units (DESIGN.md section 4).
//!
//! * The preamble is the run of leading system/developer messages.
//! * A turn starts at a real user message ([`real_users`]); messages before the first
//!   real user message belong to the first turn.
//! * A tool unit is an assistant message with tool calls plus every message holding a
//!   result for those calls. A result answers the nearest preceding call with its id; one
//!   in the assistant message of its own call answers it when no other result does.
//! * A turn boundary never falls inside a tool unit: turns that a unit spans are merged.
//! * A real user message is in no unit: the stubs repair put into it (an Anthropic call
//!   the user interrupted) answer a call of the turn before, and go when that turn goes
//!   (`trim.rs`), as the OpenAI shape's stub tool message goes with its unit.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use crate::model::{Message, PartKind};

/// Where a tool result points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallRef {
    /// Index of the message holding the call.
    pub message: usize,
    /// Index of the call among that message's parts.
    pub part: usize,
}

/// Resolution of every tool result in a conversation.
#[derive(Debug, Clone)]
pub struct Resolution {
    /// For message `i`, part `p` (a tool result): the call it answers, or `None` for an
    /// orphan. Indexed `results[i][p]`; `None` entries for parts that are not results.
    pub results: Vec<Vec<Option<CallRef>>>,
    /// For message `i`, part `p` (a tool call): indices of the messages holding its
    /// results, in order.
    pub answered_by: Vec<Vec<Vec<usize>>>,
}

/// Resolve every tool result to the nearest preceding call with its id. A result in an
/// assistant message that makes a call with its id answers that call (whatever their
/// order in the message), and only when no result in another message does: there it is
/// a misplaced copy, which repair moves to the next user message or drops as a duplicate.
pub fn resolve<M: AsRef<Message>>(messages: &[M]) -> Resolution {
    let mut latest: HashMap<&str, CallRef> = HashMap::new();
    let mut results = Vec::with_capacity(messages.len());
    let mut answered_by: Vec<Vec<Vec<usize>>> = messages
        .iter()
        .map(|m| vec![Vec::new(); m.as_ref().content.len()])
        .collect();
    // Results in an assistant message that makes a call with their id: (message, part,
    // the call's part).
    let mut own: Vec<(usize, usize, usize)> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let m = m.as_ref();
        let mut row = vec![None; m.content.len()];
        // the first call of each id, where an assistant message holds results
        let mut first: HashMap<&str, usize> = HashMap::new();
        if m.role == crate::model::Role::Assistant && m.has_tool_results() {
            for (q, part) in m.content.iter().enumerate() {
                if part.kind == PartKind::ToolCall {
                    first.entry(part.id.as_deref().unwrap_or("")).or_insert(q);
                }
            }
        }
        for (p, part) in m.content.iter().enumerate() {
            if part.kind == PartKind::ToolResult {
                let id = part.call_id.as_deref().unwrap_or("");
                if let Some(&q) = first.get(id) {
                    own.push((i, p, q)); // its nearest preceding call is in its own message
                    continue;
                }
                if let Some(c) = latest.get(id) {
                    // A call is answered once; a second result for it is a duplicate and
                    // resolves to nothing (repair drops it like an orphan).
                    let list = &mut answered_by[c.message][c.part];
                    if list.is_empty() {
                        row[p] = Some(*c);
                        list.push(i);
                    }
                }
            }
        }
        results.push(row);
        // Calls become visible to results in later messages only, and only calls made
        // by the assistant count; an id repeated within one message is one call (the
        // first); repair removes the repeats.
        if m.role == crate::model::Role::Assistant {
            let mut here: HashSet<&str> = HashSet::new();
            for (p, part) in m.content.iter().enumerate() {
                let id = part.id.as_deref().unwrap_or("");
                if part.kind == PartKind::ToolCall && here.insert(id) {
                    latest.insert(
                        id,
                        CallRef {
                            message: i,
                            part: p,
                        },
                    );
                }
            }
        }
    }
    // A result in the assistant message of its own call (found by a tester: the real
    // output was dropped and the call stubbed) answers that call when no result elsewhere
    // does, whatever its place in the message; repair then moves it where it belongs.
    for (i, p, q) in own {
        if answered_by[i][q].is_empty() {
            results[i][p] = Some(CallRef {
                message: i,
                part: q,
            });
            answered_by[i][q].push(i);
        }
    }
    Resolution {
        results,
        answered_by,
    }
}

/// Turns and tool units of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segmentation {
    /// Messages `0..preamble_end` are the preamble.
    pub preamble_end: usize,
    /// Turns, in order; they partition `preamble_end..len`.
    pub turns: Vec<Range<usize>>,
    /// Tool units: sorted message indices of each unit, units ordered by first index.
    pub units: Vec<Vec<usize>>,
    /// Index of the last real user message (the current request), if any.
    pub current_request: Option<usize>,
}

fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

/// Of each message, whether it is a real user message where it stands: one
/// ([`Message::is_real_user`]) that is not a screenshot in a tool unit (a user message
/// of media alone right after a unit's results, [`tool_units`]). Such a message is what
/// a tool showed, not what the user asked: it opens no turn and is never the current
/// request, so an OpenAI computer-use agent's task stays its turn's request as in the
/// Anthropic shape, where the screenshot sits inside the `tool_result` (fresh50 #1).
pub fn real_users<M: AsRef<Message>>(messages: &[M], res: &Resolution) -> Vec<bool> {
    real_users_in(messages, &tool_units(messages, res))
}

/// [`real_users`] given the tool units of `messages` (a segmentation's): a user message
/// of media alone is in a unit only as a screenshot there (`_reference.real_users_in`).
pub fn real_users_in<M: AsRef<Message>>(messages: &[M], units: &[Vec<usize>]) -> Vec<bool> {
    let mut real: Vec<bool> = messages.iter().map(|m| m.as_ref().is_real_user()).collect();
    for &w in units.iter().flatten() {
        if messages[w].as_ref().is_media_only() {
            real[w] = false;
        }
    }
    for (r, after) in real.iter_mut().zip(after_observations(messages)) {
        *r &= !after;
    }
    real
}

/// Index of the last real user message where it stands ([`real_users`]): the current
/// request. Resolves the calls only when the last [`Message::is_real_user`] is a
/// message of media alone, the one kind that can be a screenshot in a tool unit.
pub fn last_real_user<M: AsRef<Message>>(messages: &[M]) -> Option<usize> {
    let last = messages.iter().rposition(|m| m.as_ref().is_real_user())?;
    if !messages[last].as_ref().is_media_only() {
        return Some(last);
    }
    real_users(messages, &resolve(messages))
        .iter()
        .rposition(|&r| r)
}

/// Of each message, whether it is a user message of media alone right after a text-action
/// agent's observation ([`Message::is_observation`]) or after another such message: the
/// screenshot such an agent gets with its tool's text output. No real user message
/// ([`real_users`]), in no tool unit: it goes with the observation's step, as a
/// screenshot after tool messages goes with their unit (fresh53 #2: each opened a turn,
/// and the task was dropped first).
pub fn after_observations<M: AsRef<Message>>(messages: &[M]) -> Vec<bool> {
    let mut after = vec![false; messages.len()];
    for i in 1..messages.len() {
        after[i] = messages[i].as_ref().is_media_only()
            && (after[i - 1] || messages[i - 1].as_ref().is_observation());
    }
    after
}

/// Group messages into tool units by resolved call ids (union-find over messages), with
/// a user message of media alone right after a unit's results ([`Message::is_media_only`]:
/// a screenshot an OpenAI agent sends after the tool messages) or a `[Tool results]`
/// observation there ([`Message::is_observation`]).
pub fn tool_units<M: AsRef<Message>>(messages: &[M], res: &Resolution) -> Vec<Vec<usize>> {
    let n = messages.len();
    let mut parent: Vec<usize> = (0..n).collect();
    let mut in_unit = vec![false; n];
    for (i, row) in res.results.iter().enumerate() {
        if messages[i].as_ref().is_real_user() {
            continue; // its results are stubs; the message opens a turn
        }
        for c in row.iter().flatten() {
            let (a, b) = (find(&mut parent, i), find(&mut parent, c.message));
            parent[a.max(b)] = a.min(b);
            in_unit[i] = true;
            in_unit[c.message] = true;
        }
    }
    for (i, m) in messages.iter().enumerate() {
        if m.as_ref().role == crate::model::Role::Assistant && m.as_ref().has_tool_calls() {
            in_unit[i] = true;
        }
    }
    // A user message of media alone right after a message of the unit holding tool
    // results (or after another such message) is what the tool showed: a screenshot an
    // OpenAI agent sends after the tool messages. It goes with the unit (fresh49 #1: as
    // a turn of its own it made the last screenshot the current request and the task
    // the oldest turn, dropped first). So does a `[Tool results]` observation there,
    // output with no command of its own (fresh53 #5: in no unit and no text-action step,
    // it stayed, cut, while newer steps went).
    let mut shown = false;
    for i in 1..n {
        let (prev, m) = (messages[i - 1].as_ref(), messages[i].as_ref());
        shown = (m.is_media_only() || m.is_observation())
            && (shown || (in_unit[i - 1] && prev.has_tool_results()));
        if shown {
            let (a, b) = (find(&mut parent, i), find(&mut parent, i - 1));
            parent[a.max(b)] = a.min(b);
            in_unit[i] = true;
        }
    }
    let mut groups: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, &inside) in in_unit.iter().enumerate() {
        if inside {
            let r = find(&mut parent, i);
            groups.entry(r).or_default().push(i);
        }
    }
    let mut units: Vec<Vec<usize>> = groups.into_values().collect();
    units.sort_by_key(|u| u[0]);
    units
}

/// Split a conversation into preamble, turns and tool units.
///
/// ```
/// use contextwindow_core::model::{Message, Part, Role};
/// use contextwindow_core::turns::segment;
/// let m = |r, t: &str| Message::new(r, vec![Part::text(t)]);
/// let msgs = vec![m(Role::System, "s"), m(Role::User, "a"), m(Role::Assistant, "b"), m(Role::User, "c")];
/// let s = segment(&msgs);
/// assert_eq!(s.preamble_end, 1);
/// assert_eq!(s.turns, vec![1..3, 3..4]);
/// assert_eq!(s.current_request, Some(3));
/// ```
pub fn segment<M: AsRef<Message>>(messages: &[M]) -> Segmentation {
    let res = resolve(messages);
    segment_resolved(messages, &res)
}

/// [`segment`] with a resolution computed by the caller.
pub fn segment_resolved<M: AsRef<Message>>(messages: &[M], res: &Resolution) -> Segmentation {
    let n = messages.len();
    let preamble_end = messages
        .iter()
        .position(|m| !m.as_ref().is_preamble_role())
        .unwrap_or(n);
    let units = tool_units(messages, res);
    // a screenshot in a tool unit or after an observation is not a real user message
    let where_ = real_users_in(messages, &units);
    let real: Vec<usize> = (preamble_end..n).filter(|&i| where_[i]).collect();
    let current_request = real.last().copied();
    // Boundaries: every real user message but the first, unless a unit spans it.
    let mut is_boundary = vec![false; n + 1];
    for &i in real.iter().skip(1) {
        is_boundary[i] = true;
    }
    // Clear boundaries inside each unit's span (lo, hi] with a difference array: linear
    // in the number of messages however the spans overlap.
    let mut inside = vec![0i64; n + 2];
    for u in &units {
        let (lo, hi) = (u[0], u[u.len() - 1]);
        inside[lo + 1] += 1;
        inside[hi + 1] -= 1;
    }
    let mut depth = 0;
    for (i, b) in is_boundary.iter_mut().enumerate().take(n) {
        depth += inside[i];
        if depth > 0 {
            *b = false;
        }
    }
    let mut turns = Vec::new();
    if preamble_end < n {
        let mut start = preamble_end;
        for (i, &b) in is_boundary
            .iter()
            .enumerate()
            .take(n)
            .skip(preamble_end + 1)
        {
            if b {
                turns.push(start..i);
                start = i;
            }
        }
        turns.push(start..n);
    }
    Segmentation {
        preamble_end,
        turns,
        units,
        current_request,
    }
}
