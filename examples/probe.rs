use std::time::Instant;
fn fib_s(n: u64) -> u64 { if n < 2 { return n } fib_s(n-1) + fib_s(n-2) }
fn fib_spawn(n: u64) -> u64 { if n < 2 { return n } let a = selvedge::spawn(move || fib_spawn(n-1)); let b = fib_spawn(n-2); a.join() + b }
fn fib_join(n: u64) -> u64 { if n < 2 { return n } let (a, b) = selvedge::join(|| fib_join(n-1), || fib_join(n-2)); a + b }
fn fib_rayon(n: u64) -> u64 { if n < 2 { return n } let (a, b) = rayon::join(|| fib_rayon(n-1), || fib_rayon(n-2)); a + b }
fn t<R>(name: &str, f: impl Fn() -> R) { let mut v = vec![]; for _ in 0..7 { let s = Instant::now(); std::hint::black_box(f()); v.push(s.elapsed().as_secs_f64()*1e3); } v.sort_by(|a,b| a.partial_cmp(b).unwrap()); println!("{name:12} median {:8.2} ms  min {:8.2}", v[3], v[0]); }
fn main() {
    let n = 32;
    let th: usize = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(2);
    let rt = selvedge::Runtime::builder().num_threads(th).build().unwrap();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(th).build().unwrap();
    t("serial", || fib_s(std::hint::black_box(n)));
    t("sv spawn", || rt.run(|| fib_spawn(n)));
    t("sv join", || rt.run(|| fib_join(n)));
    t("rayon join", || pool.install(|| fib_rayon(n)));
    println!("{:?}", rt.stats().workers);
}
