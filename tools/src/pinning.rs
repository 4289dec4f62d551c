//! Pinning the peers' threads like selvedge's, for comparisons under
//! `SELVEDGE_PIN_THREADS=1`.
//!
//! With that variable set, every selvedge runtime built with the default
//! settings pins its workers (`Builder::pin_threads`). The benchmarks and
//! the demonstration then pin rayon's threads and their plain OS threads
//! the same way, so that no scheduler is measured with an advantage the
//! others lack.

/// Whether `SELVEDGE_PIN_THREADS` asks for pinned threads.
pub fn requested() -> bool {
    matches!(
        std::env::var("SELVEDGE_PIN_THREADS")
            .as_deref()
            .map(str::trim),
        Ok("1" | "true")
    )
}

/// Pins the calling thread to the `index`-th CPU the process may run on
/// (round-robin), when pinning is requested; otherwise does nothing.
pub fn pin_current_thread(index: usize) {
    if requested() {
        pin(index);
    }
}

#[cfg(target_os = "linux")]
fn pin(index: usize) {
    use std::sync::OnceLock;
    static CPUS: OnceLock<Vec<usize>> = OnceLock::new();
    let cpus = CPUS.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .expect("a Cpus_allowed_list line");
        let mut cpus = Vec::new();
        for part in list.trim().split(',') {
            match part.split_once('-') {
                Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
                None => cpus.push(part.parse().unwrap()),
            }
        }
        cpus
    });
    let cpu = cpus[index % cpus.len()];
    // SAFETY: a zeroed cpu_set_t is the empty set; `cpu` is an allowed CPU,
    // below CPU_SETSIZE; pid 0 is the calling thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(rc, 0, "could not pin a thread to CPU {cpu}");
}

#[cfg(not(target_os = "linux"))]
fn pin(_: usize) {
    panic!("SELVEDGE_PIN_THREADS=1: pinning is supported on Linux only");
}
