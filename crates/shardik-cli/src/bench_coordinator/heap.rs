//! Heap bytes in use, as the allocator itself counts them.
//!
//! The `shardik` binary keeps the system allocator: a counting global allocator would tax every
//! allocation of every other benchmark and of `shardik node`. glibc already keeps the count
//! (`mallinfo2`: bytes in chunks handed out, plus chunks served by `mmap`), so a single-threaded
//! measurement reads it before and after building something. Elsewhere (musl, macOS) the
//! resident set size stands in, which also counts pages the allocator keeps after a free.

/// Bytes the process's heap holds for live allocations (see the module docs for the source).
pub fn in_use() -> u64 {
    imp::in_use()
}

/// Where [`in_use`] comes from, for the report.
pub fn source() -> &'static str {
    imp::SOURCE
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    pub const SOURCE: &str = "glibc mallinfo2 (uordblks + hblkhd)";

    pub fn in_use() -> u64 {
        // SAFETY: mallinfo2 takes no arguments, only reads the allocator's counters under its
        // own locks, and returns a plain struct by value.
        let info = unsafe { libc::mallinfo2() };
        (info.uordblks + info.hblkhd) as u64
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    pub const SOURCE: &str = "resident set size (VmRSS)";

    pub fn in_use() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(0, |kb| kb * 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_allocation_shows_in_the_count() {
        let before = in_use();
        let block = vec![1u8; 8 << 20];
        let during = in_use();
        std::hint::black_box(&block);
        drop(block);
        assert!(
            during >= before + (8 << 20),
            "{before} -> {during} bytes from {}",
            source()
        );
    }
}
