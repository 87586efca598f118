//! The event stream the runner's callback writes (`execplane_events.py`),
//! read back: progress while the playbook runs, the typed result's recap,
//! changed and failed hosts, facts and evidence when it ends.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::contract::ops::{AnsibleEvidence, HostRecap};

/// The most the facts and evidence of all hosts may take together, as
/// JSON: a result is at most `contract::limits::MAX_RESULT_BYTES`, and a
/// play that sets fact after fact, or asserts again and again, must not
/// grow the runner's memory with its stream. The stream's artifact keeps
/// every one.
pub const MAX_KEPT_BYTES: usize = 128 * 1024;
/// The most the names (and unreachable messages) of the hosts the stream
/// speaks of may take, each set counted: thousands of hosts' worth.
const MAX_HOST_BYTES: usize = 1024 * 1024;

/// Which of a [`Summary`]'s sets of hosts.
#[derive(Clone, Copy)]
enum Noted {
    Changed,
    Failed,
    Unreachable,
}

/// The longest event line read; a longer one is skipped. The callback
/// writes a result too large for it without the result's fields.
pub const MAX_EVENT_LINE: usize = 1024 * 1024;
/// The most one line may hold once read (`runner::yaml::json`'s budget:
/// its strings' bytes and 16 a node). The stream is in the play's working
/// directory, where the play can write anything: a line of small numbers
/// in nested lists is about ten times its size as a `Value`, in the
/// runner's memory, for each attempt it runs.
const MAX_EVENT_EXPANDED: usize = 4 * MAX_EVENT_LINE;
/// The most characters of an unreachable host's message, or of a
/// host's or task's name in the evidence, kept.
const MAX_TEXT_CHARS: usize = 1024;

fn cut(text: &str) -> String {
    text.chars().take(MAX_TEXT_CHARS).collect()
}

/// The length of `text` as a JSON string.
fn json_len(text: &str) -> usize {
    Value::from(text).to_string().len()
}

/// What the stream says so far.
#[derive(Debug, Default)]
pub struct Summary {
    /// Lines read (the next line's number is `lines + 1`).
    pub lines: u64,
    pub tasks: u32,
    /// The task running now and the hosts that answered it.
    pub current_task: Option<String>,
    pub answered: u32,
    pub recap: Option<BTreeMap<String, HostRecap>>,
    /// From the results, for a stream cut off before its recap.
    changed: BTreeSet<String>,
    failed: BTreeSet<String>,
    unreachable: BTreeSet<String>,
    /// Each unreachable host's message.
    pub unreachable_messages: BTreeMap<String, String>,
    pub facts: BTreeMap<String, BTreeMap<String, Value>>,
    pub evidence: Vec<AnsibleEvidence>,
    /// Lines that were not events (never expected; counted, not fatal).
    pub unreadable: u64,
    /// What the facts and evidence kept take, as JSON.
    kept_bytes: usize,
    /// What the hosts' names and messages noted take.
    host_bytes: usize,
    /// Facts and assertions past [`MAX_KEPT_BYTES`], not kept (a fact
    /// set again past it is dropped, not left at its older value).
    pub dropped: u64,
}

impl Summary {
    /// Folds one line in. Returns whether a task started (worth a progress
    /// event).
    pub fn line(&mut self, line: &str) -> bool {
        self.lines += 1;
        let Ok(event) = crate::runner::yaml::json(line.as_bytes(), MAX_EVENT_EXPANDED) else {
            self.unreadable += 1;
            return false;
        };
        let text = |key: &str| event.get(key).and_then(Value::as_str).unwrap_or("");
        let host = cut(text("host"));
        match text("event") {
            "task_start" => {
                self.tasks += 1;
                self.current_task = Some(cut(text("task")));
                self.answered = 0;
                return true;
            }
            "runner_ok" | "runner_failed" | "runner_unreachable" | "runner_skipped" => {
                self.answered += 1;
                let action = text("action");
                let ignored = event.get("ignore_errors").and_then(Value::as_bool) == Some(true);
                if event.get("changed").and_then(Value::as_bool) == Some(true) {
                    self.note_host(Noted::Changed, &host, None);
                }
                match text("event") {
                    "runner_failed" if !ignored => {
                        self.note_host(Noted::Failed, &host, None);
                    }
                    "runner_unreachable" => {
                        let message = event
                            .pointer("/result/msg")
                            .and_then(Value::as_str)
                            .unwrap_or("unreachable");
                        self.note_host(Noted::Unreachable, &host, Some(cut(message)));
                    }
                    _ => {}
                }
                if let Some(Value::Object(facts)) = event.get("facts") {
                    for (key, value) in facts {
                        self.keep_fact(&host, key, value);
                    }
                }
                let is_assert = matches!(action, "assert" | "ansible.builtin.assert");
                let decided = matches!(text("event"), "runner_ok" | "runner_failed");
                if is_assert && decided {
                    let evidence = AnsibleEvidence {
                        host: cut(&host),
                        task: cut(text("task")),
                        passed: text("event") == "runner_ok",
                        event_line: self.lines,
                    };
                    // Its JSON: the names and about 50 bytes of keys and values.
                    let size = json_len(&evidence.host) + json_len(&evidence.task) + 64;
                    if self.kept_bytes + size > MAX_KEPT_BYTES {
                        self.dropped += 1;
                    } else {
                        self.kept_bytes += size;
                        self.evidence.push(evidence);
                    }
                }
            }
            "stats" => {
                if let Some(recap) = event.get("recap") {
                    self.recap = serde_json::from_value(recap.clone()).ok();
                }
            }
            _ => {}
        }
        false
    }

    /// Notes what happened to `host`, within [`MAX_HOST_BYTES`] for all
    /// hosts' names and messages together: the stream is the play's to
    /// write, and a name need not be one of the inventory's. A host past
    /// it is counted in `dropped`.
    fn note_host(&mut self, noted: Noted, host: &str, message: Option<String>) {
        let set = match noted {
            Noted::Changed => &mut self.changed,
            Noted::Failed => &mut self.failed,
            Noted::Unreachable => &mut self.unreachable,
        };
        if set.contains(host) {
            return;
        }
        let size = host.len()
            + message
                .as_ref()
                .map_or(0, |message| host.len() + message.len());
        if self.host_bytes + size > MAX_HOST_BYTES {
            self.dropped += 1;
            return;
        }
        self.host_bytes += size;
        set.insert(host.to_owned());
        if let Some(message) = message {
            self.unreachable_messages.insert(host.to_owned(), message);
        }
    }

    /// Keeps `host`'s fact `key` at `value` within [`MAX_KEPT_BYTES`]
    /// (a value set again is charged what it grew by); one past it is
    /// dropped, with any older value it had.
    fn keep_fact(&mut self, host: &str, key: &str, value: &Value) {
        // As JSON writes them: a control character takes six bytes.
        let size = |value: &Value| json_len(host) + json_len(key) + value.to_string().len();
        let held = self.facts.get(host).and_then(|facts| facts.get(key));
        let before = held.map_or(0, size);
        let after = size(value);
        let kept = self.kept_bytes - before;
        if kept + after > MAX_KEPT_BYTES {
            self.dropped += 1;
            if held.is_some() {
                self.kept_bytes = kept;
                if let Some(facts) = self.facts.get_mut(host) {
                    facts.remove(key);
                }
            }
            return;
        }
        self.kept_bytes = kept + after;
        self.facts
            .entry(host.to_owned())
            .or_default()
            .insert(key.to_owned(), value.clone());
    }

    /// The recap: the stream's own, else what its results said.
    pub fn recap(&self) -> BTreeMap<String, HostRecap> {
        if let Some(recap) = &self.recap {
            return recap.clone();
        }
        let mut recap: BTreeMap<String, HostRecap> = BTreeMap::new();
        for host in &self.changed {
            recap.entry(host.clone()).or_default().changed += 1;
        }
        for host in &self.failed {
            recap.entry(host.clone()).or_default().failed += 1;
        }
        for host in &self.unreachable {
            recap.entry(host.clone()).or_default().unreachable += 1;
        }
        recap
    }

    /// Hosts by what happened to them: (changed, failed, unreachable).
    pub fn hosts(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let recap = self.recap();
        let with = |pick: fn(&HostRecap) -> u32| {
            recap
                .iter()
                .filter(|(_, line)| pick(line) > 0)
                .map(|(host, _)| host.clone())
                .collect::<Vec<_>>()
        };
        (
            with(|line| line.changed),
            with(|line| line.failed),
            with(|line| line.unreachable),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const STREAM: &str = r#"{"event": "playbook_start", "playbook": "site.yml"}
{"event": "play_start", "play": "web", "hosts": ["all"]}
{"event": "task_start", "task": "set marker", "action": "copy"}
{"event": "runner_ok", "host": "a", "task": "set marker", "action": "copy", "changed": true, "facts": {}, "result": {}}
{"event": "runner_failed", "host": "b", "task": "set marker", "action": "copy", "changed": false, "facts": {}, "result": {"msg": "no"}, "ignore_errors": false}
{"event": "task_start", "task": "marker is there", "action": "ansible.builtin.assert"}
{"event": "runner_ok", "host": "a", "task": "marker is there", "action": "ansible.builtin.assert", "changed": false, "facts": {}, "result": {}}
{"event": "task_start", "task": "remember", "action": "set_fact"}
{"event": "runner_ok", "host": "a", "task": "remember", "action": "set_fact", "changed": false, "facts": {"color": "blue"}, "result": {}}
{"event": "stats", "recap": {"a": {"ok": 3, "changed": 1, "failed": 0, "unreachable": 0, "skipped": 0, "rescued": 0, "ignored": 0}, "b": {"ok": 0, "changed": 0, "failed": 1, "unreachable": 0, "skipped": 0, "rescued": 0, "ignored": 0}}}
"#;

    /// A line within the length read but holding more than its budget
    /// once read (a million small numbers in nested lists) is not read.
    #[test]
    fn a_line_that_would_grow_past_its_budget_is_not_read() {
        let inner = format!("[{}]", vec!["0"; 1000].join(","));
        let outer = format!("[{}]", vec![inner.as_str(); 400].join(","));
        let line = format!(
            r#"{{"event": "runner_ok", "host": "a", "task": "t", "action": "x", "changed": true, "facts": {{}}, "result": {{"x": {outer}}}}}"#
        );
        assert!(line.len() <= MAX_EVENT_LINE);
        let mut summary = Summary::default();
        summary.line(&line);
        assert_eq!(summary.unreadable, 1);
        assert!(summary.hosts().0.is_empty());
    }

    /// Hosts the stream names are kept within their bound, whatever the
    /// play wrote there (a name a line long, a thousand of them).
    #[test]
    fn the_hosts_a_stream_names_are_kept_within_their_bound() {
        let mut summary = Summary::default();
        for index in 0..2_000 {
            let host = format!("{index}{}", "h".repeat(64 * 1024));
            let line = json!({"event": "runner_unreachable", "host": host, "changed": true,
                              "result": {"msg": "m".repeat(64 * 1024)}});
            summary.line(&line.to_string());
        }
        assert!(summary.host_bytes <= MAX_HOST_BYTES);
        assert!(summary.dropped > 0);
        let (changed, _, unreachable) = summary.hosts();
        assert!(!changed.is_empty() && !unreachable.is_empty());
        assert!(changed
            .iter()
            .all(|host| host.chars().count() <= MAX_TEXT_CHARS));
    }

    #[test]
    fn a_stream_folds_into_the_recap_hosts_facts_and_evidence() {
        let mut summary = Summary::default();
        let started: Vec<bool> = STREAM.lines().map(|line| summary.line(line)).collect();
        assert_eq!(started.iter().filter(|started| **started).count(), 3);
        assert_eq!(summary.tasks, 3);
        let (changed, failed, unreachable) = summary.hosts();
        assert_eq!(
            (changed, failed),
            (vec!["a".to_owned()], vec!["b".to_owned()])
        );
        assert!(unreachable.is_empty());
        assert_eq!(summary.facts["a"]["color"], "blue");
        assert_eq!(summary.evidence.len(), 1);
        assert!(summary.evidence[0].passed);
        assert_eq!(summary.evidence[0].event_line, 7);
    }

    /// A play that sets fact after fact, or asserts again and again, grows
    /// what the runner holds no further than the bounds.
    #[test]
    fn facts_and_evidence_are_held_within_their_bounds() {
        let mut summary = Summary::default();
        let big = "x".repeat(1024);
        for index in 0..10_000 {
            let fact = json!({"event": "runner_ok", "host": "a", "task": "t", "action": "set_fact",
                "facts": {format!("fact{index}"): big}});
            summary.line(&fact.to_string());
            let assert = json!({"event": "runner_ok", "host": "a", "task": "t",
                "action": "assert", "facts": {}});
            summary.line(&assert.to_string());
        }
        let held: usize = summary.facts["a"]
            .iter()
            .map(|(key, value)| json_len("a") + json_len(key) + value.to_string().len())
            .sum::<usize>()
            + summary.evidence.len() * (json_len("a") + json_len("t") + 64);
        assert!(held <= MAX_KEPT_BYTES, "{held}");
        assert!(
            held > MAX_KEPT_BYTES - 2048,
            "{held}: filled up to the bound"
        );
        let kept = summary.facts["a"].len() as u64 + summary.evidence.len() as u64;
        assert_eq!(summary.dropped, 20_000 - kept);
        let result = json!({"facts": summary.facts, "evidence": summary.evidence});
        assert!(result.to_string().len() < crate::contract::limits::MAX_RESULT_BYTES);
    }

    /// A fact set again is charged what it grew by; one that no longer
    /// fits is dropped, never left at an older value.
    #[test]
    fn a_fact_set_again_is_kept_at_its_last_value_or_not_at_all() {
        let mut summary = Summary::default();
        let set = |summary: &mut Summary, value: Value| {
            let line = json!({"event": "runner_ok", "host": "a", "task": "t",
                "action": "set_fact", "facts": {"counter": value}});
            summary.line(&line.to_string());
        };
        for round in 0..100_000 {
            set(&mut summary, json!(round));
        }
        assert_eq!(summary.facts["a"]["counter"], 99_999);
        assert_eq!(summary.dropped, 0);
        set(&mut summary, json!("x".repeat(MAX_KEPT_BYTES)));
        assert!(
            !summary.facts["a"].contains_key("counter"),
            "not the older value"
        );
        assert_eq!(summary.dropped, 1);
    }

    #[test]
    fn a_stream_cut_off_before_its_recap_still_names_its_hosts() {
        let mut summary = Summary::default();
        for line in STREAM.lines().take(5) {
            summary.line(line);
        }
        summary.line("{not json");
        assert_eq!(summary.unreadable, 1);
        let (changed, failed, _) = summary.hosts();
        assert_eq!(
            (changed, failed),
            (vec!["a".to_owned()], vec!["b".to_owned()])
        );
    }
}
