//! The machine as the hub sees it: host name, cores and memory for the registration, CPU and
//! memory use for heartbeats, read with `sysinfo`.
//!
//! CPU use is the change between two samples, so the first sample after start reads 0 and
//! later ones cover the time since the previous heartbeat. Reading is a few small `/proc`
//! files on Linux: cheap enough to do inline on each heartbeat. Values are clamped to sane
//! ranges (0–100 %), never NaN.

use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};

/// What a registration says about the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MachineInfo {
    pub(crate) host: String,
    pub(crate) cores: u32,
    pub(crate) memory_bytes: u64,
}

/// One heartbeat's view of the machine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Usage {
    pub(crate) cpu_pct: f64,
    pub(crate) memory_bytes: u64,
}

/// Samples the machine.
pub(crate) struct Probe {
    sys: System,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe").finish_non_exhaustive()
    }
}

impl Probe {
    pub(crate) fn new() -> Self {
        let sys = System::new_with_specifics(
            RefreshKind::nothing()
                .with_cpu(CpuRefreshKind::nothing().with_cpu_usage())
                .with_memory(MemoryRefreshKind::nothing().with_ram()),
        );
        Self { sys }
    }

    /// Host name, logical cores and physical memory.
    pub(crate) fn machine(&self) -> MachineInfo {
        let cores = match self.sys.cpus().len() {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        MachineInfo {
            host: crate::config::host_name().unwrap_or_else(|| "unknown".into()),
            cores: u32::try_from(cores).unwrap_or(u32::MAX),
            memory_bytes: self.sys.total_memory(),
        }
    }

    /// CPU use since the previous call, and memory in use now.
    pub(crate) fn usage(&mut self) -> Usage {
        self.sys.refresh_cpu_usage();
        self.sys.refresh_memory();
        let cpu = f64::from(self.sys.global_cpu_usage());
        Usage {
            cpu_pct: if cpu.is_finite() {
                cpu.clamp(0.0, 100.0)
            } else {
                0.0
            },
            memory_bytes: self.sys.used_memory(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_sane() {
        let mut p = Probe::new();
        let m = p.machine();
        assert!(m.cores >= 1);
        assert!(m.memory_bytes > 0);
        assert!(!m.host.is_empty());
        for _ in 0..2 {
            let u = p.usage();
            assert!((0.0..=100.0).contains(&u.cpu_pct));
            assert!(u.memory_bytes > 0 && u.memory_bytes <= m.memory_bytes);
        }
    }
}
