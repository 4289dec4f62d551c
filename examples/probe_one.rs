fn fib_spawn(n: u64) -> u64 { if n < 2 { return n } let a = selvedge::spawn(move || fib_spawn(n-1)); let b = fib_spawn(n-2); a.join() + b }
fn main() {
    let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    let n: u64 = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(27);
    for _ in 0..3 { std::hint::black_box(rt.run(|| fib_spawn(n))); }
}
