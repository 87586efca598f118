//! Configuration: defaults, then an optional TOML file, then `EXECPLANE_*`
//! environment variables (which win). Every default is in the README.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The defaults, documented in the README's configuration table.
pub mod defaults {
    pub const DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/execplane";
    pub const DATABASE_MAX_CONNECTIONS: u32 = 10;
    pub const LOG: &str = "info,sqlx=warn";
    pub const KAFKA_BROKERS: &str = "127.0.0.1:9092";
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The whole configuration of one process.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `EXECPLANE_DATABASE_URL`, else `DATABASE_URL`.
    pub database_url: String,
    /// `EXECPLANE_DATABASE_MAX_CONNECTIONS`.
    pub database_max_connections: u32,
    /// `EXECPLANE_LOG`: a tracing filter, e.g. `info,execplane=debug`.
    pub log: String,
    /// `EXECPLANE_LOG_FORMAT`: `text` or `json`.
    pub log_format: LogFormat,
    /// `EXECPLANE_KAFKA_BROKERS`: bootstrap servers.
    pub kafka_brokers: String,
    /// `EXECPLANE_TOPIC_PREFIX`: prefixes every topic name.
    pub topic_prefix: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            database_url: defaults::DATABASE_URL.to_owned(),
            database_max_connections: defaults::DATABASE_MAX_CONNECTIONS,
            log: defaults::LOG.to_owned(),
            log_format: LogFormat::Text,
            kafka_brokers: defaults::KAFKA_BROKERS.to_owned(),
            topic_prefix: String::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("environment variable {name}: {message}")]
    Env { name: &'static str, message: String },
}

impl Config {
    /// Loads the file (when given, or named by `EXECPLANE_CONFIG`) and the
    /// environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_from(file, |name| std::env::var(name).ok())
    }

    /// As [`Config::load`], with the environment passed in (for tests).
    pub fn load_from(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| env("EXECPLANE_CONFIG").map(PathBuf::from));
        let mut config = match &file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                toml::from_str(&text).map_err(|error| ConfigError::Parse {
                    path: path.clone(),
                    message: error.to_string(),
                })?
            }
            None => Config::default(),
        };
        if let Some(url) = env("EXECPLANE_DATABASE_URL").or_else(|| env("DATABASE_URL")) {
            config.database_url = url;
        }
        if let Some(value) = env("EXECPLANE_DATABASE_MAX_CONNECTIONS") {
            config.database_max_connections = value.parse().map_err(|_| ConfigError::Env {
                name: "EXECPLANE_DATABASE_MAX_CONNECTIONS",
                message: format!("`{value}` is not a positive integer"),
            })?;
        }
        if let Some(value) = env("EXECPLANE_LOG") {
            config.log = value;
        }
        if let Some(value) = env("EXECPLANE_LOG_FORMAT") {
            config.log_format = match value.as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                other => {
                    return Err(ConfigError::Env {
                        name: "EXECPLANE_LOG_FORMAT",
                        message: format!("`{other}` is neither `text` nor `json`"),
                    })
                }
            };
        }
        if let Some(value) = env("EXECPLANE_KAFKA_BROKERS") {
            config.kafka_brokers = value;
        }
        if let Some(value) = env("EXECPLANE_TOPIC_PREFIX") {
            config.topic_prefix = value;
        }
        if config.database_max_connections == 0 {
            return Err(ConfigError::Env {
                name: "EXECPLANE_DATABASE_MAX_CONNECTIONS",
                message: "must be at least 1".into(),
            });
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn environment_wins_over_file_over_defaults() {
        let dir = std::env::temp_dir().join(format!("execplane-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("execplane.toml");
        std::fs::write(&path, "database_url = \"postgres://file/db\"\nlog_format = \"json\"\ntopic_prefix = \"t1.\"\n").unwrap();
        let env: HashMap<&str, &str> = HashMap::from([
            ("DATABASE_URL", "postgres://generic/db"),
            ("EXECPLANE_TOPIC_PREFIX", "t2."),
        ]);
        let config = Config::load_from(Some(&path), |name| {
            env.get(name).map(|value| value.to_string())
        })
        .unwrap();
        assert_eq!(config.database_url, "postgres://generic/db");
        assert_eq!(config.log_format, LogFormat::Json);
        assert_eq!(config.topic_prefix, "t2.");
        let env: HashMap<&str, &str> = HashMap::from([
            ("DATABASE_URL", "postgres://generic/db"),
            ("EXECPLANE_DATABASE_URL", "postgres://own/db"),
        ]);
        let config =
            Config::load_from(None, |name| env.get(name).map(|value| value.to_string())).unwrap();
        assert_eq!(config.database_url, "postgres://own/db");
        assert_eq!(config.kafka_brokers, defaults::KAFKA_BROKERS);
        std::fs::write(&path, "databse_url = 1\n").unwrap();
        assert!(matches!(
            Config::load_from(Some(&path), |_| None),
            Err(ConfigError::Parse { .. })
        ));
    }
}
