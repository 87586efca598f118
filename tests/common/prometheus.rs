//! A strict reader of the Prometheus text exposition format (0.0.4): every
//! line is a HELP/TYPE comment or a sample; names and labels are well
//! formed; a family's TYPE comes once, before its samples, and its samples
//! are contiguous. Returns every sample as `name{labels}` -> value.

use std::collections::{BTreeMap, HashSet};

fn is_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_value(text: &str) -> bool {
    matches!(text, "NaN" | "+Inf" | "-Inf" | "Inf") || text.parse::<f64>().is_ok()
}

/// Parses `{a="x",b="y\"z"}`; returns the rest of the line.
fn labels(text: &str) -> Result<(String, &str), String> {
    let mut chars = text.char_indices().peekable();
    let mut out = String::from("{");
    assert_eq!(chars.next().map(|(_, c)| c), Some('{'));
    loop {
        match chars.peek() {
            Some((index, '}')) => {
                out.push('}');
                return Ok((out, &text[index + 1..]));
            }
            None => return Err("unterminated label set".into()),
            _ => {}
        }
        let start = chars.peek().unwrap().0;
        let mut end = start;
        while let Some((index, c)) = chars.peek() {
            if *c == '=' {
                end = *index;
                break;
            }
            chars.next();
        }
        let name = &text[start..end];
        if !is_name(name) || name.contains(':') {
            return Err(format!("bad label name `{name}`"));
        }
        chars.next(); // '='
        if chars.next().map(|(_, c)| c) != Some('"') {
            return Err(format!("label `{name}` value is not quoted"));
        }
        let mut value = String::new();
        loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, c @ ('\\' | '"' | 'n'))) => value.push(c),
                    _ => return Err("bad escape in a label value".into()),
                },
                Some((_, '"')) => break,
                Some((_, c)) => value.push(c),
                None => return Err("unterminated label value".into()),
            }
        }
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&format!("{name}=\"{value}\""));
        if let Some((_, ',')) = chars.peek() {
            chars.next();
        }
    }
}

pub fn parse(text: &str) -> Result<BTreeMap<String, f64>, String> {
    let mut samples = BTreeMap::new();
    let mut typed = HashSet::new();
    let mut finished = HashSet::new();
    let mut current: Option<String> = None;
    for (number, line) in text.lines().enumerate() {
        let fail = |why: String| format!("line {}: {why}: `{line}`", number + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let keyword = parts.next().unwrap_or_default();
            let name = parts.next().unwrap_or_default();
            match keyword {
                "HELP" | "TYPE" if !is_name(name) => return Err(fail("bad metric name".into())),
                "TYPE" => {
                    let kind = parts.next().unwrap_or_default();
                    if !matches!(
                        kind,
                        "counter" | "gauge" | "summary" | "histogram" | "untyped"
                    ) {
                        return Err(fail(format!("unknown type `{kind}`")));
                    }
                    if !typed.insert(name.to_owned()) || finished.contains(name) {
                        return Err(fail("a family typed twice or after its samples".into()));
                    }
                }
                _ => {}
            }
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| fail("no value".into()))?;
        let name = &line[..name_end];
        if !is_name(name) {
            return Err(fail("bad metric name".into()));
        }
        let (label_text, rest) = if line[name_end..].starts_with('{') {
            labels(&line[name_end..]).map_err(fail)?
        } else {
            (String::new(), &line[name_end..])
        };
        let mut fields = rest.split_whitespace();
        let value = fields.next().ok_or_else(|| fail("no value".into()))?;
        if !is_value(value) {
            return Err(fail(format!("bad value `{value}`")));
        }
        if let Some(timestamp) = fields.next() {
            if timestamp.parse::<i64>().is_err() {
                return Err(fail("bad timestamp".into()));
            }
        }
        if fields.next().is_some() {
            return Err(fail("trailing fields".into()));
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                name.strip_suffix(suffix)
                    .filter(|base| typed.contains(*base))
            })
            .unwrap_or(name)
            .to_owned();
        if current.as_deref() != Some(family.as_str()) {
            if finished.contains(&family) {
                return Err(fail(format!("samples of `{family}` are not contiguous")));
            }
            if let Some(previous) = current.replace(family.clone()) {
                finished.insert(previous);
            }
        }
        let key = format!("{name}{label_text}");
        if samples
            .insert(key.clone(), value.parse::<f64>().unwrap_or(f64::NAN))
            .is_some()
        {
            return Err(fail(format!("duplicate sample `{key}`")));
        }
    }
    Ok(samples)
}

/// The sum of a metric's samples whose labels contain every `label="value"`.
pub fn sum(samples: &BTreeMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(key, _)| {
            key.split('{').next() == Some(name) && labels.iter().all(|label| key.contains(label))
        })
        .map(|(_, value)| value)
        .sum()
}
