//! What a run cost the machine, measured around it: the CPU time of every
//! process (the roles, the broker, Postgres and the bench's own driver,
//! from `/proc/stat`), of this process alone, and the bytes of WAL
//! Postgres wrote; and, apart, the CPU time a virtual machine's host took
//! for others (steal) and the time the CPUs were idle. The machine's
//! figure is only the run's own on a machine that does nothing else; the
//! bench says so where it prints it.

use serde::Serialize;

use crate::store::Store;

/// The counters at the start of a run.
pub struct Meter {
    machine: CpuTicks,
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
    /// Milliseconds the machine's CPUs wanted to run and the hypervisor ran
    /// something else (`steal`): not counted in `machine_cpu_ms`.
    pub stolen_cpu_ms: f64,
    /// Milliseconds of all the machine's CPUs over the run, busy or not.
    pub capacity_cpu_ms: f64,
}

impl Meter {
    pub async fn start(store: &Store) -> anyhow::Result<Self> {
        Ok(Self {
            machine: CpuTicks::now()?,
            process_ns: process_cpu_ns(),
            wal_lsn: store.wal_lsn().await?,
        })
    }

    pub async fn read(&self, store: &Store) -> anyhow::Result<Cost> {
        let spent = CpuTicks::now()?.since(&self.machine);
        let per_second = rustix::param::clock_ticks_per_second().max(1);
        let ms = |ticks: u64| ticks as f64 * 1000.0 / per_second as f64;
        Ok(Cost {
            machine_cpu_ms: ms(spent.busy),
            process_cpu_ms: process_cpu_ns().saturating_sub(self.process_ns) as f64 / 1e6,
            wal_bytes: store.wal_bytes_since(&self.wal_lsn).await?,
            stolen_cpu_ms: ms(spent.steal),
            capacity_cpu_ms: ms(spent.total),
        })
    }
}

/// The `cpu` line of `/proc/stat`, summed over the machine's CPUs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct CpuTicks {
    /// Running anything: all but `idle`, `iowait` and `steal` (`guest` time
    /// is already counted in `user`).
    busy: u64,
    /// Wanting to run while the hypervisor ran another machine. On a shared
    /// host it is not this machine's work, and it varies with the
    /// neighbours: counted as busy it made a run's CPU per attempt swing
    /// with the hour (docs/BENCHMARKS.md, tenth section).
    steal: u64,
    /// Everything, idle included.
    total: u64,
}

impl CpuTicks {
    fn now() -> anyhow::Result<Self> {
        let stat = std::fs::read_to_string("/proc/stat")?;
        let line = stat
            .lines()
            .find(|line| line.starts_with("cpu "))
            .ok_or_else(|| anyhow::anyhow!("/proc/stat has no `cpu` line"))?;
        Ok(Self::parse(line))
    }

    fn parse(line: &str) -> Self {
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(|field| field.parse().unwrap_or(0))
            .collect();
        // user nice system idle iowait irq softirq steal [guest guest_nice]
        let field = |index: usize| fields.get(index).copied().unwrap_or(0);
        let total: u64 = fields.iter().sum();
        let steal = field(7);
        Self {
            busy: total - field(3) - field(4) - steal,
            steal,
            total,
        }
    }

    fn since(&self, start: &Self) -> Self {
        Self {
            busy: self.busy.saturating_sub(start.busy),
            steal: self.steal.saturating_sub(start.steal),
            total: self.total.saturating_sub(start.total),
        }
    }
}

fn process_cpu_ns() -> u128 {
    let time = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    time.tv_sec as u128 * 1_000_000_000 + time.tv_nsec as u128
}

#[cfg(test)]
mod tests {
    use super::CpuTicks;

    #[test]
    fn steal_and_idle_are_not_busy() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let ticks = CpuTicks::parse("cpu  100 5 20 1000 7 0 3 40 9 0");
        assert_eq!(
            ticks,
            CpuTicks {
                busy: 100 + 5 + 20 + 3,
                steal: 40,
                total: 100 + 5 + 20 + 1000 + 7 + 3 + 40,
            }
        );
        // A kernel without the later columns.
        assert_eq!(
            CpuTicks::parse("cpu  1 2 3 4"),
            CpuTicks {
                busy: 6,
                steal: 0,
                total: 10
            }
        );
    }
}
