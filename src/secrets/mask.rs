//! Masking at the source: every resolved secret value, and its base64,
//! URL-encoded and JSON-escaped forms, is replaced before text leaves the
//! runner. [`StreamMasker`] holds back the tail of a stream that could be
//! the start of a form, so a value split across chunks is caught too.

use base64::Engine;

/// Lines of a multi-line value at least this long are masked on their own.
pub const MIN_LINE_MASKED: usize = 8;

/// What a masked form is replaced with.
pub const MASK: &str = "[masked]";

/// The forms of a set of secret values, longest first.
#[derive(Clone, Debug, Default)]
pub struct Masker {
    forms: Vec<String>,
}

/// Percent-encoding of every byte outside RFC 3986's unreserved set, in
/// upper and lower case hex, and the form-encoding variant (space as `+`).
fn url_forms(value: &str) -> Vec<String> {
    let encode = |upper: bool, plus: bool| {
        let mut out = String::new();
        for byte in value.bytes() {
            match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    out.push(byte as char)
                }
                b' ' if plus => out.push('+'),
                _ if upper => out.push_str(&format!("%{byte:02X}")),
                _ => out.push_str(&format!("%{byte:02x}")),
            }
        }
        out
    };
    vec![
        encode(true, false),
        encode(false, false),
        encode(true, true),
        encode(false, true),
    ]
}

/// RFC 3986 percent-encoding (upper-case hex), one of the masked forms.
pub fn percent_encode(value: &str) -> String {
    url_forms(value).swap_remove(0)
}

/// Every form a value may take in output.
pub fn forms_of(value: &str) -> Vec<String> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let mut forms = vec![value.to_owned()];
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        forms.push(engine.encode(value.as_bytes()));
    }
    forms.extend(url_forms(value));
    let json = serde_json::to_string(value).unwrap_or_default();
    forms.push(json[1..json.len().saturating_sub(1).max(1)].to_owned());
    forms
}

impl Masker {
    /// Masks `values` (empty values are ignored) in every form.
    pub fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut forms: Vec<String> = Vec::new();
        for value in values.into_iter().filter(|value| !value.is_empty()) {
            forms.extend(forms_of(value));
            // A tool may print the value trimmed, or a multi-line value
            // (a PEM key) line by line.
            let trimmed = value.trim();
            if trimmed != value && !trimmed.is_empty() {
                forms.extend(forms_of(trimmed));
            }
            if trimmed.contains('\n') {
                forms.extend(
                    trimmed
                        .lines()
                        .map(str::trim)
                        .filter(|line| line.len() >= MIN_LINE_MASKED)
                        .map(str::to_owned),
                );
            }
        }
        forms.retain(|form| !form.is_empty());
        forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        forms.dedup();
        Self { forms }
    }

    pub fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }

    /// Whether any form appears in `bytes` (which need not be text), in one
    /// linear scan.
    pub fn found_in(&self, bytes: &[u8]) -> bool {
        if self.forms.is_empty() {
            return false;
        }
        let alternatives: Vec<String> = self.forms.iter().map(|form| regex::escape(form)).collect();
        match regex::bytes::Regex::new(&alternatives.join("|")) {
            Ok(any) => any.is_match(bytes),
            // Too many or too long to compile: the slow scan, never a pass.
            Err(_) => self.forms.iter().any(|form| {
                bytes
                    .windows(form.len())
                    .any(|window| window == form.as_bytes())
            }),
        }
    }

    /// `text` with every form replaced by [`MASK`] (leftmost, longest
    /// first).
    pub fn mask(&self, text: &str) -> String {
        self.scan(text, false).0
    }

    /// Scans from the left, replacing the longest form that starts at each
    /// position. When `streaming`, stops where the rest of `text` could be
    /// the beginning of a longer form, and says how far it got.
    fn scan(&self, text: &str, streaming: bool) -> (String, usize) {
        let bytes = text.as_bytes();
        // A whole text only: a stream's `…` is the tool's, not a cut.
        let cuts = if streaming {
            Default::default()
        } else {
            self.cuts(text)
        };
        let mut out = String::with_capacity(text.len());
        let (mut at, mut plain_from) = (0, 0);
        while at < bytes.len() {
            let rest = &bytes[at..];
            if streaming
                && self
                    .forms
                    .iter()
                    .any(|form| form.len() > rest.len() && form.as_bytes().starts_with(rest))
            {
                break;
            }
            if let Some(form) = self
                .forms
                .iter()
                .find(|form| rest.starts_with(form.as_bytes()))
            {
                out.push_str(&text[plain_from..at]);
                out.push_str(MASK);
                at += form.len();
                plain_from = at;
                continue;
            }
            // A form cut short where a text was shortened (`…` ends what
            // `contract::limits::shortened` keeps): its first part is
            // masked as the whole would be.
            if let Some(&end) = cuts.get(&at) {
                out.push_str(&text[plain_from..at]);
                out.push_str(MASK);
                at = end;
                plain_from = at;
                continue;
            }
            at += text[at..].chars().next().map_or(1, char::len_utf8);
        }
        out.push_str(&text[plain_from..at]);
        (out, at)
    }
}

/// The shortest beginning of a form masked when it is cut short.
const MIN_CUT_MASKED: usize = 4;

impl Masker {
    /// Where a form was cut where a text was shortened: its beginning
    /// (at least [`MIN_CUT_MASKED`] bytes, not the whole form) right
    /// before a `…` (`limits::shortened`), or its end right after one
    /// (`limits::shortened_tail`); start → end, the widest for each.
    /// Looked for only around each `…` of `text`, so a text without one
    /// costs nothing more.
    fn cuts(&self, text: &str) -> std::collections::HashMap<usize, usize> {
        let bytes = text.as_bytes();
        let mut cuts = std::collections::HashMap::new();
        let forms = || {
            self.forms
                .iter()
                .map(String::as_bytes)
                .filter(|form| form.len() > MIN_CUT_MASKED)
        };
        for (at, ellipsis) in text.match_indices('…') {
            // A beginning that ends here.
            let end = at;
            let earliest = forms()
                .filter_map(|form| {
                    let from = end.saturating_sub(form.len() - 1);
                    (from..=end.saturating_sub(MIN_CUT_MASKED)).find(|&start| {
                        end - start >= MIN_CUT_MASKED
                            && text.is_char_boundary(start)
                            && bytes[start..].starts_with(&form[..MIN_CUT_MASKED])
                            && form.starts_with(&bytes[start..end])
                    })
                })
                .min();
            if let Some(start) = earliest {
                cuts.insert(start, end);
            }
            // An end that starts here.
            let start = at + ellipsis.len();
            let longest = forms()
                .filter_map(|form| {
                    (1..=form.len() - MIN_CUT_MASKED)
                        .find(|&skip| bytes[start..].starts_with(&form[skip..]))
                        .map(|skip| form.len() - skip)
                })
                .max();
            if let Some(length) = longest.filter(|length| text.is_char_boundary(start + length)) {
                cuts.insert(start, start + length);
            }
        }
        cuts
    }
}

/// Masks a stream given in chunks: what it returns never contains a form,
/// nor the beginning of one that a later chunk might complete.
#[derive(Clone, Debug, Default)]
pub struct StreamMasker {
    masker: Masker,
    pending: String,
}

impl StreamMasker {
    pub fn new(masker: Masker) -> Self {
        Self {
            masker,
            pending: String::new(),
        }
    }

    /// The masked text that is safe to emit now.
    pub fn push(&mut self, chunk: &str) -> String {
        self.pending.push_str(chunk);
        let (out, consumed) = self.masker.scan(&self.pending, true);
        self.pending.drain(..consumed);
        out
    }

    /// Whatever was held back, masked: the stream has ended. A tail held
    /// back as the beginning of a form that never came (the output cut at
    /// its bound, the tool killed mid-write) may be the head of a secret:
    /// it is masked whole, never released.
    pub fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.pending);
        let (mut out, consumed) = self.masker.scan(&rest, true);
        let tail = &rest[consumed..];
        if !tail.is_empty() {
            let masked = self.masker.mask(tail);
            out.push_str(if masked == tail { MASK } else { &masked });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECRET: &str = "p@ss/w0rd+\"q\" &<x>";

    #[test]
    fn every_form_is_masked() {
        let masker = Masker::new([SECRET]);
        for form in forms_of(SECRET) {
            let masked = masker.mask(&format!("before {form} after"));
            assert_eq!(masked, format!("before {MASK} after"), "form {form}");
        }
        assert!(forms_of(SECRET).contains(&"cEBzcy93MHJkKyJxIiAmPHg+".to_owned()));
        assert!(forms_of(SECRET).contains(&"p%40ss%2Fw0rd%2B%22q%22%20%26%3Cx%3E".to_owned()));
        assert!(forms_of(SECRET).contains(&r#"p@ss/w0rd+\"q\" &<x>"#.to_owned()));
        assert_eq!(Masker::new([""]).mask("anything"), "anything");
        let pem = "-----BEGIN KEY-----\nMIIBOgIBAAJBAKj34GkxFhD9\n-----END KEY-----\n";
        let masker = Masker::new([pem]);
        assert_eq!(
            masker.mask("line: MIIBOgIBAAJBAKj34GkxFhD9"),
            format!("line: {MASK}")
        );
        assert_eq!(masker.mask(pem.trim()), MASK);
    }

    /// A text cut short mid-secret (`shortened`, as a failure quotes a
    /// server's message) keeps none of the secret's first part either.
    #[test]
    fn a_form_cut_short_is_masked() {
        let masker = Masker::new(["hunter2-secret"]);
        let cut =
            crate::contract::limits::shortened("the server said: hunter2-secret was wrong", 24);
        assert_eq!(cut, "the server said: hunter2…");
        assert_eq!(masker.mask(&cut), format!("the server said: {MASK}…"));
        // Its end after a cut from the front, as a tool's last words are.
        let cut = crate::contract::limits::shortened_tail("it said hunter2-secret", 10);
        assert_eq!(cut, "…er2-secret");
        assert_eq!(
            masker.mask(&format!("failed: {cut}")),
            format!("failed: …{MASK}")
        );
        // Too little of it to be the secret's: left as it is.
        assert_eq!(masker.mask("hun…"), "hun…");
        assert_eq!(masker.mask("…ret"), "…ret");
        assert_eq!(masker.mask("a hunter, not a cut"), "a hunter, not a cut");
    }

    #[test]
    fn a_value_split_across_chunks_is_caught() {
        let mut stream = StreamMasker::new(Masker::new(["hunter2-secret"]));
        let mut out = stream.push("password: hunter");
        assert_eq!(out, "password: ");
        out.push_str(&stream.push("2-sec"));
        out.push_str(&stream.push("ret and more\n"));
        out.push_str(&stream.finish());
        assert_eq!(out, format!("password: {MASK} and more\n"));
        // A prefix that turns out not to be the value is released.
        let mut stream = StreamMasker::new(Masker::new(["hunter2-secret"]));
        let mut out = stream.push("hunt");
        out.push_str(&stream.push("ing season"));
        out.push_str(&stream.finish());
        assert_eq!(out, "hunting season");
        // Cut short (the output's bound, a killed tool): what could be the
        // head of the value is masked, never released.
        let mut stream = StreamMasker::new(Masker::new(["hunter2-secret"]));
        let mut out = stream.push("password: hunter2-se");
        out.push_str(&stream.finish());
        assert_eq!(out, format!("password: {MASK}"));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// However the output is cut, no chunk emitted carries the secret
        /// or any form of it, and nothing else is lost or altered.
        #[test]
        fn chunked_output_never_carries_a_form(
            secret in "[a-zA-Z0-9@/+ \"&<>é]{6,24}",
            filler in proptest::collection::vec("[a-z .\n]{0,20}", 1..6),
            cuts in proptest::collection::vec(1usize..40, 1..20),
        ) {
            let forms = forms_of(&secret);
            let mut text = String::new();
            for (index, piece) in filler.iter().enumerate() {
                text.push_str(piece);
                text.push_str(&forms[index % forms.len()]);
            }
            let mut stream = StreamMasker::new(Masker::new([secret.as_str()]));
            let mut emitted = Vec::new();
            let mut rest = text.as_str();
            let mut cut = cuts.iter().cycle();
            while !rest.is_empty() {
                let mut take = (*cut.next().unwrap()).min(rest.len());
                while !rest.is_char_boundary(take) {
                    take += 1;
                }
                emitted.push(stream.push(&rest[..take]));
                rest = &rest[take..];
            }
            emitted.push(stream.finish());
            let joined: String = emitted.concat();
            for form in &forms {
                prop_assert!(!joined.contains(form.as_str()), "form {:?} leaked", form);
            }
            prop_assert_eq!(joined, Masker::new([secret.as_str()]).mask(&text));
        }
    }
}
