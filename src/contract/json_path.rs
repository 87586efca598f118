//! Where a value sits in a JSON document, for the problems that name it.

use std::fmt;

/// Where a value sits in a JSON document, as a `Problem` names it
/// (`inputs.headers[2].name`). Built on the stack while a walk descends and
/// rendered only when a problem is found: a walk over a valid document
/// allocates nothing for paths. Keys are rendered [`loggable`].
///
/// [`loggable`]: super::limits::loggable
#[derive(Clone, Copy, Debug)]
pub enum JsonPath<'a> {
    /// The path a walk starts from (empty: the document itself).
    Root(&'a str),
    Key(&'a JsonPath<'a>, &'a str),
    Index(&'a JsonPath<'a>, usize),
}

impl<'a> JsonPath<'a> {
    pub fn key<'b>(&'b self, key: &'b str) -> JsonPath<'b>
    where
        'a: 'b,
    {
        JsonPath::Key(self, key)
    }

    pub fn index<'b>(&'b self, index: usize) -> JsonPath<'b>
    where
        'a: 'b,
    {
        JsonPath::Index(self, index)
    }
}

impl From<JsonPath<'_>> for String {
    fn from(path: JsonPath<'_>) -> Self {
        path.to_string()
    }
}

impl fmt::Display for JsonPath<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonPath::Root(path) => formatter.write_str(path),
            JsonPath::Key(JsonPath::Root(""), key) => {
                formatter.write_str(&super::limits::loggable(key))
            }
            JsonPath::Key(parent, key) => {
                write!(formatter, "{parent}.{}", super::limits::loggable(key))
            }
            JsonPath::Index(parent, index) => write!(formatter, "{parent}[{index}]"),
        }
    }
}

#[cfg(test)]
mod json_path_tests {
    use super::JsonPath;

    #[test]
    fn paths_render_as_problems_name_them() {
        let root = JsonPath::Root("");
        assert_eq!(root.key("inputs").to_string(), "inputs");
        let inputs = JsonPath::Root("inputs");
        let headers = inputs.key("headers");
        assert_eq!(
            headers.index(2).key("name").to_string(),
            "inputs.headers[2].name"
        );
        assert_eq!(root.index(0).to_string(), "[0]");
        assert_eq!(inputs.key("a\nb").to_string(), "inputs.a\\nb");
    }
}
