//! `Builder::pin_threads` and `SELVEDGE_PIN_THREADS`.
//!
//! One test in its own binary: it sets an environment variable that every
//! runtime build reads, which would race with other tests' builds.

use selvedge::{BuildError, Runtime};

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::BTreeSet;

    /// A `Cpus_allowed_list` value ("0-3,6") as a set of CPUs.
    fn parse_cpu_list(list: &str) -> BTreeSet<usize> {
        let mut cpus = BTreeSet::new();
        for part in list.trim().split(',').filter(|p| !p.is_empty()) {
            match part.split_once('-') {
                Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
                None => {
                    cpus.insert(part.parse().unwrap());
                }
            }
        }
        cpus
    }

    fn allowed_of(status: &str) -> BTreeSet<usize> {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .expect("a Cpus_allowed_list line");
        parse_cpu_list(line)
    }

    /// The CPUs the calling thread may run on.
    pub fn own_cpus() -> BTreeSet<usize> {
        allowed_of(&std::fs::read_to_string("/proc/thread-self/status").unwrap())
    }

    /// The allowed CPUs of each thread named `{prefix}-{i}`, by `i`. A
    /// thread names itself once it runs, so this waits for the names.
    pub fn worker_cpus(prefix: &str, n: usize) -> Vec<BTreeSet<usize>> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let found = find_threads(prefix, n);
            if found.iter().all(Option::is_some) || std::time::Instant::now() > deadline {
                return found
                    .into_iter()
                    .enumerate()
                    .map(|(i, s)| s.unwrap_or_else(|| panic!("no thread {prefix}-{i}")))
                    .collect();
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    fn find_threads(prefix: &str, n: usize) -> Vec<Option<BTreeSet<usize>>> {
        let mut found = vec![None; n];
        for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            let Some(i) = comm
                .trim()
                .strip_prefix(prefix)
                .and_then(|r| r.strip_prefix('-'))
                .and_then(|i| i.parse::<usize>().ok())
            else {
                continue;
            };
            let status = std::fs::read_to_string(e.path().join("status")).unwrap();
            found[i] = Some(allowed_of(&status));
        }
        found
    }

    /// Restricts the calling thread to `cpu`.
    pub fn restrict_to(cpu: usize) {
        // SAFETY: a zeroed cpu_set_t is the empty set; `cpu` is below
        // CPU_SETSIZE; pid 0 is the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
                0
            );
        }
    }
}

#[cfg(target_os = "linux")]
#[test]
fn pinning_spreads_workers_over_the_allowed_cpus() {
    use linux::*;
    let cpus = own_cpus();
    let k = cpus.len();

    // As many workers as CPUs: one CPU each, all different.
    let rt = Runtime::builder()
        .num_threads(k)
        .thread_name("pinA")
        .pin_threads(true)
        .build()
        .unwrap();
    let got = worker_cpus("pinA", k);
    assert!(got.iter().all(|s| s.len() == 1), "{got:?}");
    let used: std::collections::BTreeSet<usize> = got.iter().flatten().copied().collect();
    assert_eq!(used, cpus, "every allowed CPU gets one worker: {got:?}");
    assert_eq!(
        rt.run(|| selvedge::parallel_for(0..1000).reduce(|| 0, |a, i| a + i, |a, b| a + b)),
        499_500
    );
    drop(rt);

    // Twice as many: round-robin, each CPU twice.
    let rt = Runtime::builder()
        .num_threads(2 * k)
        .thread_name("pinB")
        .pin_threads(true)
        .build()
        .unwrap();
    let got = worker_cpus("pinB", 2 * k);
    for cpu in &cpus {
        let n = got
            .iter()
            .filter(|s| s.len() == 1 && s.contains(cpu))
            .count();
        assert_eq!(n, 2, "CPU {cpu}: {got:?}");
    }
    drop(rt);

    // Not pinned: workers keep the process's CPUs.
    let rt = Runtime::builder()
        .num_threads(2)
        .thread_name("free")
        .build()
        .unwrap();
    assert!(worker_cpus("free", 2).iter().all(|s| *s == cpus));
    drop(rt);

    // A building thread restricted to one CPU: every worker goes there.
    let last = *cpus.iter().next_back().unwrap();
    std::thread::spawn(move || {
        restrict_to(last);
        let rt = Runtime::builder()
            .num_threads(3)
            .thread_name("pinC")
            .pin_threads(true)
            .build()
            .unwrap();
        let got = worker_cpus("pinC", 3);
        assert!(
            got.iter().all(|s| s.len() == 1 && s.contains(&last)),
            "{got:?}"
        );
        assert_eq!(rt.run(|| 7), 7);
    })
    .join()
    .unwrap();

    // The environment variable: the default, overridden by the builder.
    let old = std::env::var("SELVEDGE_PIN_THREADS").ok();
    std::env::set_var("SELVEDGE_PIN_THREADS", "1");
    let env_on = Runtime::builder()
        .num_threads(1)
        .thread_name("envon")
        .build()
        .unwrap();
    let env_on_cpus = worker_cpus("envon", 1);
    let overridden = Runtime::builder()
        .num_threads(1)
        .thread_name("envoff")
        .pin_threads(false)
        .build()
        .unwrap();
    let overridden_cpus = worker_cpus("envoff", 1);
    std::env::set_var("SELVEDGE_PIN_THREADS", "false");
    let env_off = Runtime::builder()
        .num_threads(1)
        .thread_name("envno")
        .build()
        .unwrap();
    let env_off_cpus = worker_cpus("envno", 1);
    std::env::set_var("SELVEDGE_PIN_THREADS", "sometimes");
    let bad = Runtime::builder().num_threads(1).build().unwrap_err();
    match old {
        Some(v) => std::env::set_var("SELVEDGE_PIN_THREADS", v),
        None => std::env::remove_var("SELVEDGE_PIN_THREADS"),
    }
    drop((env_on, overridden, env_off));
    assert_eq!(env_on_cpus[0].len(), 1, "SELVEDGE_PIN_THREADS=1 pins");
    assert_eq!(
        overridden_cpus[0], cpus,
        "pin_threads(false) wins over the variable"
    );
    assert_eq!(
        env_off_cpus[0], cpus,
        "SELVEDGE_PIN_THREADS=false does not pin"
    );
    assert_eq!(
        bad,
        BuildError::InvalidPinVar {
            value: "sometimes".into()
        }
    );
    assert_eq!(
        bad.to_string(),
        "SELVEDGE_PIN_THREADS must be 0, 1, false or true, found \"sometimes\""
    );
}

#[cfg(not(target_os = "linux"))]
#[test]
fn pinning_is_refused_off_linux() {
    let e = Runtime::builder()
        .num_threads(1)
        .pin_threads(true)
        .build()
        .unwrap_err();
    assert!(matches!(e, BuildError::Pin { index: 0, .. }), "{e}");
    assert!(e.to_string().contains("Linux only"), "{e}");
}
