use std::fmt;
use std::time::Duration;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// A duration with millisecond precision.
///
/// In JSON it is written the human way (`"30s"`, `"10m"`, `"1h 30m"`) or as a
/// plain integer of milliseconds; it is always printed the human way. In Avro
/// it is a `long` of milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DurationMs(pub u64);

impl DurationMs {
    pub const fn from_secs(secs: u64) -> Self {
        Self(secs * 1000)
    }
    /// Milliseconds as a signed number, saturating, for timestamp arithmetic.
    pub fn as_i64(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }
    pub fn as_std(self) -> Duration {
        Duration::from_millis(self.0)
    }
    pub fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        if let Ok(millis) = trimmed.parse::<u64>() {
            return Ok(Self(millis));
        }
        humantime::parse_duration(trimmed)
            .map(|duration| Self(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)))
            .map_err(|error| format!("`{trimmed}` is not a duration ({error}); write e.g. \"30s\", \"10m\" or \"1h\""))
    }
}

impl fmt::Display for DurationMs {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}", humantime::format_duration(self.as_std()))
    }
}

impl Serialize for DurationMs {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for DurationMs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = DurationMs;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a duration such as \"30s\" or a number of milliseconds")
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<DurationMs, E> {
                Ok(DurationMs(value))
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<DurationMs, E> {
                u64::try_from(value)
                    .map(DurationMs)
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<DurationMs, E> {
                DurationMs::parse(value).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_human_and_integer_forms() {
        assert_eq!(DurationMs::parse("30s").unwrap(), DurationMs(30_000));
        assert_eq!(DurationMs::parse("10m").unwrap(), DurationMs(600_000));
        assert_eq!(DurationMs::parse("1500").unwrap(), DurationMs(1500));
        assert!(DurationMs::parse("soon").is_err());
        let json: DurationMs = serde_json::from_str("\"1m 30s\"").unwrap();
        assert_eq!(json, DurationMs(90_000));
        assert_eq!(
            serde_json::to_string(&DurationMs(90_000)).unwrap(),
            "\"1m 30s\""
        );
    }
}
