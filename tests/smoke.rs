use selvedge::*;
fn fib(n: u64) -> u64 { if n < 2 { return n } let a = spawn(move || fib(n-1)); let b = fib(n-2); a.join() + b }
#[test]
fn smoke() {
    for threads in [1, 2, 4, 8] {
        let rt = Runtime::builder().num_threads(threads).build().unwrap();
        assert_eq!(rt.run(|| fib(25)), 75025);
        let mut v = vec![0u64; 1000];
        rt.run(|| scope(|s| for (i, x) in v.iter_mut().enumerate() { s.spawn(move |_| *x = i as u64 * 2); }));
        assert_eq!(v.iter().sum::<u64>(), 999*1000);
        let hs: Vec<_> = (0..10000u64).map(|i| rt.submit(move || i)).collect();
        assert_eq!(hs.into_iter().map(|h| h.join()).sum::<u64>(), 9999*10000/2);
        eprintln!("{threads}: {:?}", rt.stats().total());
    }
}
