//! What a run cost the machine, measured around it: the CPU time of every
//! process (the roles, the broker, Postgres and the bench's own driver,
//! from `/proc/stat`), of this process alone, and the bytes of WAL
//! Postgres wrote. The machine's figure is only the run's own on a
//! machine that does nothing else; the bench says so where it prints it.

use serde::Serialize;

use crate::store::Store;

/// The counters at the start of a run.
pub struct Meter {
    machine_ticks: u64,
    process_ns: u128,
    wal_lsn: String,
}

/// What the run cost, divided by nothing yet.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Cost {
    /// CPU milliseconds of every process on the machine.
    pub machine_cpu_ms: f64,
    /// CPU milliseconds of this process (every role in it, and the bench).
    pub process_cpu_ms: f64,
    /// Bytes of WAL the database cluster wrote.
    pub wal_bytes: u64,
}

impl Meter {
    pub async fn start(store: &Store) -> anyhow::Result<Self> {
        Ok(Self {
            machine_ticks: machine_busy_ticks()?,
            process_ns: process_cpu_ns(),
            wal_lsn: store.wal_lsn().await?,
        })
    }

    pub async fn read(&self, store: &Store) -> anyhow::Result<Cost> {
        let ticks = machine_busy_ticks()?.saturating_sub(self.machine_ticks);
        let per_second = rustix::param::clock_ticks_per_second().max(1);
        Ok(Cost {
            machine_cpu_ms: ticks as f64 * 1000.0 / per_second as f64,
            process_cpu_ms: process_cpu_ns().saturating_sub(self.process_ns) as f64 / 1e6,
            wal_bytes: store.wal_bytes_since(&self.wal_lsn).await?,
        })
    }
}

/// Clock ticks every CPU spent not idle (`/proc/stat`, `cpu` line: all but
/// `idle` and `iowait`; `guest` time is already counted in `user`).
fn machine_busy_ticks() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat
        .lines()
        .find(|line| line.starts_with("cpu "))
        .ok_or_else(|| anyhow::anyhow!("/proc/stat has no `cpu` line"))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    Ok(fields
        .iter()
        .take(8)
        .enumerate()
        .filter(|(index, _)| !matches!(index, 3 | 4))
        .map(|(_, ticks)| ticks)
        .sum())
}

fn process_cpu_ns() -> u128 {
    let time = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    time.tv_sec as u128 * 1_000_000_000 + time.tv_nsec as u128
}
