//! Logs (tracing) and metrics (Prometheus), set up once per process.

pub mod metrics;

use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogFormat};

/// Installs the global subscriber: `EXECPLANE_LOG` filter, text or JSON,
/// to stderr (stdout is for command output).
pub fn init(config: &Config) {
    let mut filter =
        EnvFilter::try_new(&config.telemetry.log).unwrap_or_else(|_| EnvFilter::new("info"));
    // The secret-store client's request tracing is never wanted in our logs
    // unless asked for by name.
    for quiet in ["rustify", "vaultrs"] {
        if !config.telemetry.log.contains(quiet) {
            if let Ok(directive) = format!("{quiet}=warn").parse() {
                filter = filter.add_directive(directive);
            }
        }
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match config.telemetry.log_format {
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
