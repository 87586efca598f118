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
/// to stderr (stdout is for command output), with colours only on a
/// terminal.
///
/// Lines are formatted where they are logged and written by a thread of
/// their own, many to a write: a log line per attempt cost the runner's
/// workers a `write(2)` each (half of what its logging cost, about 3 % of
/// the process under load; docs/BENCHMARKS.md), and a reader of stderr
/// that stops reading must not stop the runtime. Up to `LOG_LINES_BUFFERED`
/// lines wait for it; beyond that, lines are dropped, not waited for, and
/// counted ([`log_lines_dropped`]).
/// [`finish`] writes what is still buffered.
pub fn init(settings: &TelemetrySettings) {
    use std::io::IsTerminal;
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
    let ansi = std::io::stderr().is_terminal();
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(LOG_LINES_BUFFERED)
        .lossy(true)
        .thread_name("execplane-log")
        .finish(std::io::BufWriter::with_capacity(
            64 * 1024,
            std::io::stderr(),
        ));
    let writer_errors = writer.error_counter();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    let installed = match settings.log_format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
    if installed.is_ok() {
        if let Ok(mut slot) = LOG_WRITER.lock() {
            *slot = Some(guard);
        }
        let _ = LOG_LINES_DROPPED.set(writer_errors);
    }
}

/// Log lines dropped since the process started because the writer thread
/// was `LOG_LINES_BUFFERED` lines behind (`execplane_log_lines_dropped_total`).
pub fn log_lines_dropped() -> u64 {
    LOG_LINES_DROPPED
        .get()
        .map_or(0, |counter| counter.dropped_lines() as u64)
}

static LOG_LINES_DROPPED: std::sync::OnceLock<tracing_appender::non_blocking::ErrorCounter> =
    std::sync::OnceLock::new();

/// Log lines waiting for the writer thread before new ones are dropped.
const LOG_LINES_BUFFERED: usize = 64 * 1024;

/// The writer thread of the installed subscriber, until [`finish`].
static LOG_WRITER: std::sync::Mutex<Option<tracing_appender::non_blocking::WorkerGuard>> =
    std::sync::Mutex::new(None);

/// Writes out the lines still buffered and stops the writer thread (it
/// waits for the thread up to a second); lines logged after it are
/// dropped. Call it last, once the runtime has stopped.
pub fn finish() {
    let guard = LOG_WRITER.lock().ok().and_then(|mut slot| slot.take());
    drop(guard);
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
