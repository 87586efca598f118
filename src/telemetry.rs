//! Logs (tracing) and metrics (Prometheus), set up once per process.

pub mod health;
pub mod metrics;

use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Logs and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TelemetrySettings {
    /// `EXECPLANE_LOG`: a tracing filter, e.g. `info,execplane=debug`.
    pub log: String,
    /// `EXECPLANE_LOG_FORMAT`: `text` or `json`.
    pub log_format: LogFormat,
    /// `EXECPLANE_METRICS_ADDR`: where long-running roles serve `/metrics`,
    /// `/healthz` and `/readyz`; empty: off.
    pub metrics_addr: String,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            log: "info,sqlx=warn".into(),
            log_format: LogFormat::Text,
            metrics_addr: "127.0.0.1:9464".into(),
        }
    }
}

/// Installs the global subscriber: `EXECPLANE_LOG` filter, text or JSON,
/// to stderr (stdout is for command output).
pub fn init(settings: &TelemetrySettings) {
    let mut filter = EnvFilter::try_new(&settings.log).unwrap_or_else(|_| EnvFilter::new("info"));
    // The secret-store client's request tracing is never wanted in our logs
    // unless asked for by name.
    for quiet in ["rustify", "vaultrs"] {
        if !settings.log.contains(quiet) {
            if let Ok(directive) = format!("{quiet}=warn").parse() {
                filter = filter.add_directive(directive);
            }
        }
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match settings.log_format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// A database URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords() {
        assert_eq!(
            super::redact("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(super::redact("postgres://u@h/db"), "postgres://u@h/db");
    }
}
